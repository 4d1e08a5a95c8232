"""Typed, frozen configuration objects, validated on construction.

Every bad value raises :class:`ConfigError` (a ``ValueError``) whose message names the field and
what is allowed, so the CLI and the app can show it as one line instead of a traceback.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

MAX_K = 32


class ConfigError(ValueError):
    """A user-facing configuration mistake: the message names the field and what is allowed."""


def _require(ok: bool, field: str, allowed: str, value) -> None:
    if not ok:
        raise ConfigError(f"{field} must be {allowed} (got {value!r})")


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


@dataclass(frozen=True)
class SamplingConfig:
    """How logits become a distribution; applied identically to p (verifier) and q (draft).

    temperature == 0 selects the exact argmax path (a one-hot distribution), not a tiny divisor.
    top_k == 0 and top_p == 1.0 disable those filters, as in transformers' ``generate()``.
    """

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0

    def __post_init__(self):
        t = self.temperature
        _require(isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t) and t >= 0,
                 "temperature", "a finite number >= 0", t)
        _require(_is_int(self.top_k) and self.top_k >= 0, "top_k", "an integer >= 0 (0 disables it)", self.top_k)
        p = self.top_p
        _require(isinstance(p, (int, float)) and not isinstance(p, bool) and math.isfinite(p) and 0 < p <= 1,
                 "top_p", "in (0, 1]", p)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


@dataclass(frozen=True)
class GenerationConfig:
    """One generation run. ``k`` is the most drafted tokens per round (ignored by the baseline);
    ``confidence`` > 0 makes drafting adaptive: a model draft stops early after a token whose
    untempered draft probability is below it (transformers' ``assistant_confidence_threshold``).
    The draft length then depends only on the draft, so the rule stays lossless."""

    max_new_tokens: int = 64
    k: int = 6             # defaults measured on the embedded pair: benchmarks/results, README "Speed"
    confidence: float = 0.6
    seed: int = 0
    sampling: SamplingConfig = SamplingConfig()
    sync_timing: bool = False  # synchronise the device around each phase for exact per-phase times

    def __post_init__(self):
        _require(_is_int(self.k) and 1 <= self.k <= MAX_K, "k", f"an integer in [1, {MAX_K}]", self.k)
        c = self.confidence
        _require(isinstance(c, (int, float)) and not isinstance(c, bool) and 0 <= c < 1,
                 "confidence", "a number in [0, 1), 0 for a constant K", c)
        _require(_is_int(self.max_new_tokens) and self.max_new_tokens >= 1,
                 "max_new_tokens", "an integer >= 1", self.max_new_tokens)
        _require(_is_int(self.seed) and 0 <= self.seed < 2**63, "seed", "an integer in [0, 2^63)", self.seed)
        _require(isinstance(self.sampling, SamplingConfig), "sampling", "a SamplingConfig", self.sampling)


def validate_prompt(prompt) -> str:
    if not isinstance(prompt, str) or not prompt.strip():
        raise ConfigError("prompt must be a non-empty string")
    return prompt
