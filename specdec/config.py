"""Typed, frozen configuration objects, validated on construction.

Every bad value raises :class:`ConfigError` (a ``ValueError``) whose message names the field and
what is allowed, and whose ``field`` attribute names it for a caller that shows the error next to
its input (the app). The defaults declared here are the only copies: the CLI, the app and the
benchmarks read them from these classes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

MAX_K = 32
MAX_TREE_WIDTH = 8
MAX_TREE_NODES = 64
MIN_TEMPERATURE = 0.01  # below this (but above 0) logits / T overflows or rounds every token but one away


class ConfigError(ValueError):
    """A user-facing configuration mistake: the message names the field and what is allowed."""

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.field = field


def _require(ok: bool, field: str, allowed: str, value) -> None:
    if not ok:
        raise ConfigError(f"{field} must be {allowed} (got {value!r})", field)


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _set(obj, name: str, value) -> None:
    object.__setattr__(obj, name, value)  # normalising a frozen field in __post_init__


@dataclass(frozen=True)
class SamplingConfig:
    """How logits become a distribution; applied identically to p (verifier) and q (draft).

    temperature == 0 selects the exact argmax path (a one-hot distribution), not a tiny divisor;
    a positive temperature must be at least ``MIN_TEMPERATURE``. top_k == 0 and top_p == 1.0
    disable those filters, as in transformers' ``generate()``. Integers are accepted where a
    number is asked for and stored as floats (transformers' warpers insist on floats).
    """

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0

    def __post_init__(self):
        t = self.temperature
        _require(_is_number(t) and (t == 0 or t >= MIN_TEMPERATURE), "temperature",
                 f"0 (greedy) or a finite number >= {MIN_TEMPERATURE}", t)
        _require(_is_int(self.top_k) and self.top_k >= 0, "top_k", "an integer >= 0 (0 disables it)", self.top_k)
        p = self.top_p
        _require(_is_number(p) and 0 < p <= 1, "top_p", "a number in (0, 1]", p)
        _set(self, "temperature", float(t))
        _set(self, "top_p", float(p))

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


@dataclass(frozen=True)
class DecodeConfig:
    """One decoding run. ``k`` is the most drafted tokens per round (ignored by the baseline);
    ``confidence`` > 0 makes drafting adaptive: a model draft stops early after a token whose
    untempered top probability is below it (transformers' ``assistant_confidence_threshold``).
    The draft length then depends only on the draft, so the rule stays lossless.
    ``draft_noise`` e in [0, 1] degrades the draft on purpose, losslessly: it samples from and
    reports (1 - e) q + e * uniform. ``ignore_eos`` lets a run go on past stop tokens up to
    ``max_new_tokens`` (equal work for timing comparisons, as vLLM's benchmarks do).
    ``tree_width`` W and ``tree_nodes`` N shape the tree drafter's trees (children per expanded
    node, node budget; K is the depth); 0 lets the machine's measured cost fit choose."""

    max_new_tokens: int = 64
    k: int = 6             # defaults measured on the embedded pair: benchmarks/results, docs/results.md
    confidence: float = 0.6
    seed: int = 0
    sampling: SamplingConfig = SamplingConfig()
    draft_noise: float = 0.0
    ignore_eos: bool = False
    tree_width: int = 0
    tree_nodes: int = 0

    def __post_init__(self):
        _require(_is_int(self.k) and 1 <= self.k <= MAX_K, "k", f"an integer in [1, {MAX_K}]", self.k)
        c = self.confidence
        _require(_is_number(c) and 0 <= c < 1, "confidence", "a number in [0, 1), 0 for a constant K", c)
        _require(_is_int(self.max_new_tokens) and self.max_new_tokens >= 1,
                 "max_new_tokens", "an integer >= 1", self.max_new_tokens)
        _require(_is_int(self.seed) and 0 <= self.seed < 2**63, "seed", "an integer in [0, 2^63)", self.seed)
        _require(isinstance(self.sampling, SamplingConfig), "sampling", "a SamplingConfig", self.sampling)
        e = self.draft_noise
        _require(_is_number(e) and 0 <= e <= 1, "draft_noise", "a number in [0, 1], 0 for the draft as it is", e)
        _require(isinstance(self.ignore_eos, bool), "ignore_eos", "True or False", self.ignore_eos)
        _require(_is_int(self.tree_width) and 0 <= self.tree_width <= MAX_TREE_WIDTH, "tree_width",
                 f"an integer in [1, {MAX_TREE_WIDTH}], or 0 to choose by this machine's costs", self.tree_width)
        _require(_is_int(self.tree_nodes) and 0 <= self.tree_nodes <= MAX_TREE_NODES, "tree_nodes",
                 f"an integer in [1, {MAX_TREE_NODES}], or 0 to choose by this machine's costs", self.tree_nodes)
        _set(self, "confidence", float(c))
        _set(self, "draft_noise", float(e))


def validate_prompt(prompt) -> str:
    if not isinstance(prompt, str) or not prompt.strip():
        raise ConfigError("prompt must be a non-empty string", "prompt")
    return prompt
