"""Logits -> distribution -> token, identical for the verifier (p) and the draft (q).

Temperature, top-k and top-p use transformers' own warpers in the order ``generate()`` applies
them, so speculative sampling targets exactly what ``generate(do_sample=True, ...)`` samples from.
Temperature 0 is an exact argmax path: a one-hot distribution, never ``logits / 1e-5``.

Shapes: N rows (positions), V vocabulary entries.
"""
from __future__ import annotations

import torch
from transformers.generation.logits_process import (
    LogitsProcessorList,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from .config import SamplingConfig


def _warpers(cfg: SamplingConfig) -> LogitsProcessorList:
    # Same construction and order as GenerationMixin._get_logits_processor: no-op settings are skipped.
    warpers = LogitsProcessorList()
    if cfg.temperature != 1.0:
        warpers.append(TemperatureLogitsWarper(cfg.temperature))
    if cfg.top_k != 0:
        warpers.append(TopKLogitsWarper(top_k=cfg.top_k, min_tokens_to_keep=1))
    if cfg.top_p < 1.0:
        warpers.append(TopPLogitsWarper(top_p=cfg.top_p, min_tokens_to_keep=1))
    return warpers


def probs_from_logits(logits: torch.Tensor, cfg: SamplingConfig) -> torch.Tensor:
    """(N, V) logits -> (N, V) float32 probabilities on the CPU."""
    assert logits.dim() == 2, f"expected (N, V) logits, got {tuple(logits.shape)}"
    logits = logits.detach().float().cpu()
    if cfg.greedy:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()  # (N, V)
    # The warpers ignore input_ids for these three; an empty placeholder keeps their signature.
    warped = _warpers(cfg)(torch.empty(logits.shape[0], 0, dtype=torch.long), logits)
    return torch.softmax(warped, dim=-1)  # (N, V)


def sample(probs: torch.Tensor, greedy: bool, generator: torch.Generator) -> torch.Tensor:
    """(N, V) probabilities -> (N,) token ids. Greedy is argmax and consumes no randomness."""
    if greedy:
        return probs.argmax(-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)
