"""The tiny model pair the tests run on: the builders are :mod:`benchmarks.tiny_pair` (one builder for
the tests and the benchmarks' ``--tiny`` mode), read here under the names the tests use; and one
check only the tests need."""
from __future__ import annotations

import torch

from benchmarks.tiny_pair import (
    EOS,
    V,
    lean,
    model,
    noisy_copy,
    pair,
    prompt_ids,
    tokenizer,
)

__all__ = ["EOS", "V", "lean", "model", "noisy_copy", "pair", "prompt_ids", "tokenizer",
           "verification_and_single_rows"]


def verification_and_single_rows(lean_model, ids: list[int], cached: int = 8):
    """The logits of ``ids[cached:]`` from one forward of all of them, and from one forward each,
    after the same ``cached`` tokens: equal exactly when the forward is batch-invariant."""
    from specdec.model.lm import CachedLM
    a, b = CachedLM(lean_model, V), CachedLM(lean_model, V)
    a.forward(ids[:cached], keep=1)
    b.forward(ids[:cached], keep=1)
    together = a.forward(ids[cached:], keep=len(ids) - cached)
    return together, torch.cat([b.forward([t], keep=1) for t in ids[cached:]])
