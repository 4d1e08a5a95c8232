"""Typed, frozen configuration objects, validated on construction.

Each field is an option declared once (:func:`~specdec.options.option`): its type, default, what
is allowed, its one-line meaning and the app's label. The CLI, the trace files, the app and the
benchmarks read them from these classes. Every bad value raises :class:`ConfigError` (a
``ValueError``) whose message names the field and what is allowed, and whose ``field`` attribute
names it for a caller that shows the error next to its input (the app).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .options import ConfigError, check, option

MAX_K = 32
MAX_TREE_WIDTH = 8
MAX_TREE_NODES = 64
MIN_TEMPERATURE = 0.01  # below this (but above 0) logits / T overflows or rounds every token but one away


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _whole(low: int, high: float = math.inf):
    """An integer in [low, high] (a bool is no integer here)."""
    return lambda x: isinstance(x, int) and not isinstance(x, bool) and low <= x <= high


def _is_bool(x) -> bool:
    return isinstance(x, bool)


@dataclass(frozen=True)
class SamplingConfig:
    """How logits become a distribution; applied identically to p (verifier) and q (draft).

    temperature == 0 selects the exact argmax path (a one-hot distribution), not a tiny divisor;
    a positive temperature must be at least ``MIN_TEMPERATURE``. top_k == 0 and top_p == 1.0
    disable those filters, as in transformers' ``generate()``. Integers are accepted where a
    number is asked for and stored as floats.
    """

    temperature: float = option(
        "0 = greedy; try 0.8 to see the rule at work", default=0.0,
        allowed=f"0 (greedy) or a finite number >= {MIN_TEMPERATURE}",
        valid=lambda t: _is_number(t) and (t == 0 or t >= MIN_TEMPERATURE), label="Temperature (0 = greedy)")
    top_k: int = option("sample among the k most likely tokens only; 0 = off", default=0,
                        allowed="an integer >= 0 (0 disables it)", valid=_whole(0), label="Top-k (0 = off)")
    top_p: float = option("sample among the fewest most likely tokens that hold this much probability; 1 = off",
                          default=1.0, allowed="a number in (0, 1]", valid=lambda p: _is_number(p) and 0 < p <= 1,
                          label="Top-p")

    __post_init__ = check

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


@dataclass(frozen=True, kw_only=True)
class DecodeConfig:
    """One decoding run. ``k`` is the most drafted tokens per round (ignored by the baseline);
    ``confidence`` > 0 makes drafting adaptive: a model draft stops early after a token whose
    untempered top probability is below it (transformers' ``assistant_confidence_threshold``).
    The draft length then depends only on the draft, so the rule stays lossless.
    ``draft_noise`` e in [0, 1] degrades the draft on purpose, losslessly: it samples from and
    reports (1 - e) q + e * uniform. ``ignore_eos`` lets a run go on past stop tokens up to
    ``max_new_tokens`` (equal work for timing comparisons, as vLLM's benchmarks do).
    ``tree_width`` W and ``tree_nodes`` N shape the tree drafter's trees (children per expanded
    node, node budget; K is the depth); 0 lets the machine's measured cost fit choose.

    The fields are in the order the app shows them (a trace's settings keep it too)."""

    # the defaults of k and confidence are measured on the embedded pair: benchmarks/results, docs/results.md
    k: int = option(f"most tokens the draft proposes per round, 1 to {MAX_K} (a tree: its depth)", default=6,
                    allowed=f"an integer in [1, {MAX_K}]", valid=_whole(1, MAX_K), label="K (drafted tokens per round)")
    tree_width: int = option(
        f"children per expanded node of a tree, 1 to {MAX_TREE_WIDTH} (1 is a chain; 0: this machine's measured "
        "costs choose)", default=0, valid=_whole(0, MAX_TREE_WIDTH),
        allowed=f"an integer in [1, {MAX_TREE_WIDTH}], or 0 to choose by this machine's costs",
        label="Tree width W (0 = this machine's choice)", drafters=("tree",))
    tree_nodes: int = option(
        f"most drafted nodes per round of a tree, 1 to {MAX_TREE_NODES} (0: this machine's measured costs choose)",
        default=0, valid=_whole(0, MAX_TREE_NODES),
        allowed=f"an integer in [1, {MAX_TREE_NODES}], or 0 to choose by this machine's costs",
        label="Tree nodes N (0 = this machine's choice)", drafters=("tree",))
    confidence: float = option(
        "a draft stops early after a token it is less sure of than this; 0 = always K", default=0.6,
        allowed="a number in [0, 1), 0 for a constant K", valid=lambda c: _is_number(c) and 0 <= c < 1,
        label="Draft confidence (0 = always K)")
    draft_noise: float = option(
        "e in [0, 1]: the draft samples from (1 - e) * q + e * uniform; lossless, just a worse draft", default=0.0,
        allowed="a number in [0, 1], 0 for the draft as it is", valid=lambda e: _is_number(e) and 0 <= e <= 1,
        label="Draft noise e (0 = as it is)")
    sampling: SamplingConfig = SamplingConfig()
    seed: int = option("same seed, same run", default=0, allowed="an integer in [0, 2^63)", valid=_whole(0, 2**63 - 1),
                       label="Seed")
    max_new_tokens: int = option("most tokens to generate", default=64, allowed="an integer >= 1", valid=_whole(1),
                                 label="Max new tokens")
    ignore_eos: bool = option("go on past stop tokens up to max-new-tokens (equal work for timing)", default=False,
                              allowed="True or False", valid=_is_bool)

    __post_init__ = check


def validate_prompt(prompt) -> str:
    if not isinstance(prompt, str) or not prompt.strip():
        raise ConfigError("prompt must be a non-empty string", "prompt")
    return prompt
