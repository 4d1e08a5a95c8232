"""The tiny model pair the tests run on: the builders are :mod:`benchmarks.tiny_pair` (one builder for
the tests and the benchmarks' ``--tiny`` mode), read here under the names the tests use; and one
check and one reference only the tests need."""
from __future__ import annotations

import itertools

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
           "verification_and_single_rows", "exact_marginals"]


def verification_and_single_rows(lean_model, ids: list[int], cached: int = 8):
    """The logits of ``ids[cached:]`` from one forward of all of them, and from one forward each,
    after the same ``cached`` tokens: equal exactly when the forward is batch-invariant."""
    from specdec.model.lm import CachedLM
    a, b = CachedLM(lean_model, V), CachedLM(lean_model, V)
    a.forward(ids[:cached], keep=1)
    b.forward(ids[:cached], keep=1)
    together = a.forward(ids[cached:], keep=len(ids) - cached)
    return together, torch.cat([b.forward([t], keep=1) for t in ids[cached:]])


def exact_marginals(verifier, prompt, sampling, n):
    """Exact distribution of each of the first n tokens under the verifier alone, by enumeration."""
    from specdec.decode.sampling import probs_from_logits
    vocab = V
    prefixes, weights, marginals = [[]], torch.ones(1), []
    with torch.inference_mode():
        for _ in range(n):
            x = torch.tensor([prompt + pre for pre in prefixes])
            probs = probs_from_logits(verifier(x).logits[:, -1, :vocab], sampling)       # (P, V)
            marginals.append((weights[:, None] * probs).sum(0))
            joint = weights[:, None] * probs
            keep = joint.flatten() > 1e-5  # prune negligible branches (their mass bounds the error)
            pairs = list(itertools.product(range(len(prefixes)), range(vocab)))
            prefixes = [prefixes[i] + [t] for (i, t), k in zip(pairs, keep.tolist()) if k]
            weights = joint.flatten()[keep]
    return marginals
