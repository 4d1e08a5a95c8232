"""Drafters: who proposes the K tokens the verifier checks.

Contract: ``propose`` returns the drafted ids *and exactly the distribution each was sampled
from*. The most repeated bug in the field is drafting by argmax while the ratio uses softmax q
(transformers #32867); here the draft model samples from the same warped q it returns, and a
deterministic drafter (prompt lookup) returns one-hot q.

Shapes: K drafted tokens, V vocabulary entries.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .cache import CachedLM
from .config import SamplingConfig
from .devices import Clock
from .sampling import probs_from_logits, sample


@dataclass(frozen=True)
class Proposal:
    tokens: list[int]        # (K,)
    probs: torch.Tensor      # (K, V) the distributions the tokens were drawn from
    forward_s: float = 0.0   # wall time inside model forwards


class Drafter:
    """Interface. A drafter lives for one generation; it may keep state (a KV cache)."""

    cache: CachedLM | None = None

    def propose(self, context: list[int], k: int, sampling: SamplingConfig,
                generator: torch.Generator, confidence: float = 0.0) -> Proposal:
        raise NotImplementedError

    def prefill(self, prompt: list[int], cancelled=lambda: False) -> bool:
        return self.cache.prefill(prompt[:-1], cancelled) if self.cache is not None else True

    def rollback(self, context: list[int]) -> None:
        if self.cache is not None:
            self.cache.rollback(context)


class NoDrafter(Drafter):
    """Proposes nothing: every round is one plain verifier step. The verifier-only baseline."""

    def __init__(self, vocab_size: int):
        self.vocab_size = vocab_size

    def propose(self, context, k, sampling, generator, confidence=0.0) -> Proposal:
        return Proposal([], torch.zeros(0, self.vocab_size))


class ModelDrafter(Drafter):
    """A small causal LM drafting autoregressively with its own KV cache."""

    def __init__(self, model, vocab_size: int, clock: Clock):
        self.cache, self.clock = CachedLM(model, vocab_size), clock

    def propose(self, context, k, sampling, generator, confidence=0.0) -> Proposal:
        feed = context[len(self.cache):]  # the last context token, plus a token it missed
        tokens, dists, forward_s = [], [], 0.0
        for _ in range(k):
            t0 = self.clock()
            logits = self.cache.forward(feed, keep=1)     # (1, V)
            forward_s += self.clock() - t0
            q = probs_from_logits(logits, sampling)       # (1, V)
            token = int(sample(q, sampling.greedy, generator))
            tokens.append(token)
            dists.append(q)
            feed = [token]
            # max softmax probability, from the raw logits so that it means the same at any temperature
            if confidence and float(torch.exp(-torch.logsumexp(logits[0] - logits[0].max(), -1))) < confidence:
                break
        return Proposal(tokens, torch.cat(dists) if dists else torch.zeros(0, self.cache.vocab_size), forward_s)


class LookupDrafter(Drafter):
    """Prompt lookup decoding (Saxena 2023): copy what followed the latest earlier occurrence of
    the context's last n-gram. Needs no second model; q is one-hot, so a token is kept with
    probability p(x) and greedy acceptance is exact. Proposes nothing when nothing matches."""

    def __init__(self, vocab_size: int, max_ngram: int = 3, min_ngram: int = 1):
        self.vocab_size, self.max_ngram, self.min_ngram = vocab_size, max_ngram, min_ngram

    def propose(self, context, k, sampling, generator, confidence=0.0) -> Proposal:
        tokens = self._lookup(context, k)
        probs = torch.zeros(len(tokens), self.vocab_size)  # (K, V)
        if tokens:
            probs[torch.arange(len(tokens)), torch.tensor(tokens)] = 1.0
        return Proposal(tokens, probs)

    def _lookup(self, ctx: list[int], k: int) -> list[int]:
        for n in range(min(self.max_ngram, len(ctx) - 1), self.min_ngram - 1, -1):
            tail = ctx[-n:]
            # latest earlier occurrence first: recent text predicts best
            for at in range(len(ctx) - n - 1, -1, -1):
                if ctx[at:at + n] == tail:
                    follow = ctx[at + n:at + n + k]
                    if follow:
                        return follow
        return []
