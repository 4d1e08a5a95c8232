"""Logits -> distribution -> token, identical for the verifier (p) and the draft (q).

Temperature, top-k and top-p use transformers' own warpers in the order ``generate()`` applies
them, so speculative sampling targets exactly what ``generate(do_sample=True, ...)`` samples from.
Temperature 0 is an exact argmax path: a one-hot distribution, never ``logits / 1e-5``.

Everything runs on the logits' device; a host read of a result (a device sync) is the caller's,
packed with the round's other numbers (:func:`host_read`).

Shapes: N rows (positions), V vocabulary entries.
"""
from __future__ import annotations

import torch

from specdec.options import SamplingConfig


class NumericalError(ArithmeticError):
    """A model produced logits that give no probability distribution (NaN or infinite values)."""


NUCLEUS_CANDIDATES = 1024  # top-p looks for the nucleus among this many tokens first


def _warpers(cfg: SamplingConfig, vocab: int):
    """transformers' warpers, built as GenerationMixin._get_logits_processor builds them (same order;
    no-op settings skipped). Imported here, so the rule (:mod:`specdec.decode.rule`) loads without transformers."""
    from transformers.generation.logits_process import (
        LogitsProcessorList,
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )
    warpers = LogitsProcessorList()
    if cfg.temperature != 1.0:
        warpers.append(TemperatureLogitsWarper(cfg.temperature))
    if cfg.top_k != 0:
        warpers.append(TopKLogitsWarper(top_k=cfg.top_k, min_tokens_to_keep=1))
    if cfg.top_p < 1.0:
        top_p = TopPLogitsWarper(top_p=cfg.top_p, min_tokens_to_keep=1)
        warpers.append(top_p if vocab <= 4 * NUCLEUS_CANDIDATES else lambda ids, s: _top_p(s, cfg.top_p, top_p, ids))
    return warpers


def _top_p(scores: torch.Tensor, top_p: float, full, input_ids) -> torch.Tensor:
    """transformers' TopPLogitsWarper without sorting the whole vocabulary (a sort of all V entries
    per row, on the CPU the slow part, when the nucleus is a few of them). It keeps a token iff the
    probability mass strictly above it is < top_p (its rule: the ascending cumulative mass up to the
    token is > 1 - top_p), always the top one. When the top candidates hold the nucleus (their mass exceeds top_p with room for
    rounding), the decision needs only them; otherwise fall back to the full sort."""
    # The fallback test is a host read: on an accelerator the full sort is cheap and never waits for one.
    if scores.device.type != "cpu":
        return full(input_ids, scores)
    probs = scores.softmax(-1)                                                 # (N, V)
    vals, idx = probs.topk(NUCLEUS_CANDIDATES, dim=-1)                         # (N, C) descending
    if not bool((vals.sum(-1) > top_p + 1e-4).all()):
        return full(input_ids, scores)
    keep = (vals.cumsum(-1) - vals) < top_p                                    # (N, C) mass strictly above
    keep[:, 0] = True
    out = torch.full_like(scores, float("-inf"))
    return out.scatter(1, idx, torch.where(keep, scores.gather(1, idx), float("-inf")))


def probs_from_logits(logits: torch.Tensor, cfg: SamplingConfig, check: bool = True) -> torch.Tensor:
    """(N, V) logits -> (N, V) float32 probabilities on the logits' device. NumericalError when the
    logits hold NaN, or when no finite distribution comes out of them. ``check=False`` skips that
    test, a host read: the caller then tests :func:`numerics` once per round, with its other reads."""
    if logits.dim() != 2:
        raise ValueError(f"expected (N, V) logits, got {tuple(logits.shape)}")
    logits = logits.detach().float()
    if cfg.greedy:
        probs = torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()  # (N, V)
    else:
        # The warpers ignore input_ids for these three; an empty placeholder keeps their signature.
        ids = torch.empty(logits.shape[0], 0, dtype=torch.long, device=logits.device)
        probs = torch.softmax(_warpers(cfg, logits.shape[-1])(ids, logits), dim=-1)  # (N, V)
    if check:
        raise_numerical(*numerics(logits, probs).tolist(), cfg)
    return probs


def numerics(logits: torch.Tensor, probs: torch.Tensor | None = None) -> torch.Tensor:
    """(2,) float on the device: 1 where some logit is NaN, 1 where some probability is not finite
    (0 without ``probs``). Left there, to be read with the round's other numbers (:func:`host_read`)
    and given to :func:`raise_numerical`.

    Both are read off one sum each, not a test of every entry (on a CPU ~0.15 ms for 7 rows of
    V = 151936 against 2.3 ms): a sum is NaN iff an entry is NaN or +inf meets -inf (softmax then gives
    NaN as well; finite logits would need magnitudes near 1e33 to overflow into that). Probabilities
    are at most 1, so their sum is finite iff every one of them is.
    """
    nan = torch.isnan(logits.sum())
    not_finite = torch.zeros_like(nan) if probs is None else ~torch.isfinite(probs.sum())
    return torch.stack([nan, not_finite]).float()


def raise_numerical(nan: float, not_finite: float, cfg: SamplingConfig) -> None:
    """NumericalError for the flags :func:`numerics` read, NaN logits first (they explain the rest)."""
    if nan:
        raise NumericalError("the model produced NaN logits; try another precision (--precision float32)")
    if not_finite:
        raise NumericalError(f"temperature {cfg.temperature:g} gave probabilities that are not finite numbers "
                             "(the logits divided by it overflow); use a larger temperature, or 0 for greedy")


def host_read(*parts: torch.Tensor) -> list[float]:
    """Device tensors in ONE host read (one device sync): flattened, concatenated, as float32, which
    holds every token id and index < 2^24 exactly."""
    return torch.cat([t.reshape(-1).float() for t in parts]).tolist()


def to_device(values: list, device: torch.device, dtype: torch.dtype = torch.long) -> torch.Tensor:
    """Host numbers (token ids, indices) as a tensor on ``device``, copied without waiting for its queue."""
    return torch.tensor(values, dtype=dtype).to(device, non_blocking=True)


def sample(probs: torch.Tensor, greedy: bool, generator: torch.Generator) -> torch.Tensor:
    """(N, V) probabilities -> (N,) token ids. Greedy is argmax and consumes no randomness."""
    if greedy:
        return probs.argmax(-1)
    return draw(probs, generator)


def draw(probs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """(N, V) -> (N,): one sample per row by inverse CDF, one uniform each. ``torch.multinomial``
    draws one exponential per vocabulary entry, V per row where this draws one."""
    cdf = probs.cumsum(-1)                                                     # (N, V)
    u = torch.rand(probs.shape[0], 1, generator=generator, device=probs.device) * cdf[:, -1:]  # (N, 1) in [0, total)
    token = torch.searchsorted(cdf, u, right=True).squeeze(-1)                 # first entry with cdf > u
    # Rounding can put u at the very top: take the last token that has mass, never one without.
    last = probs.shape[-1] - 1 - (probs.flip(-1) > 0).float().argmax(-1)
    return torch.minimum(token, last)
