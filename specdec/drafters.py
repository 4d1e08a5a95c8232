"""Drafters: who proposes the K tokens the verifier checks.

Contract: ``propose`` returns the drafted ids *and exactly the distribution each was sampled
from*. The most repeated bug in the field is drafting by argmax while the ratio uses softmax q
(transformers #32867); here the draft model samples from the same warped q it returns, and a
deterministic drafter (prompt lookup) returns one-hot q.

When to stop drafting may depend on the drafts themselves (a low-confidence token, a stop token)
but never on the verifier: the number of drafts is then a stopping time of the draft process and
the rule stays lossless. A proposal says why it stopped, so the app can show it.

A drafter can be made worse on purpose, losslessly: with ``noise`` e > 0 it samples from and
reports q' = (1 - e) q + e / V, a mixture with the uniform distribution over the V real tokens
(also at temperature 0, where q is one-hot: the draft then samples from q' instead of taking its
argmax). Acceptance falls as e grows; the output distribution stays p.

Shapes: K drafted tokens, V vocabulary entries.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .cache import CachedLM
from .config import SamplingConfig
from .devices import Clock
from .sampling import NumericalError, draw, probs_from_logits, sample

# Why a proposal ended. LIMIT: it drafted as many tokens as it was asked for (the engine tells K
# from the round's budget); CONFIDENCE: the draft's confidence in its last token was below the
# threshold; STOP_TOKEN: it drafted a stop token; NO_MATCH: prompt lookup found nothing to copy;
# COPY_END: prompt lookup copied all that followed its match; NOTHING: verifier only.
LIMIT, CONFIDENCE, STOP_TOKEN, NO_MATCH, COPY_END, NOTHING = (
    "limit", "confidence", "stop_token", "no_match", "copy_end", "nothing")
LOOKUP, MODEL = "lookup", "model"  # who drafted a hybrid drafter's proposal


@dataclass(frozen=True)
class Proposal:
    tokens: list[int]        # (K,)
    probs: torch.Tensor      # (K, V) the distributions the tokens were drawn from
    forward_s: float = 0.0   # wall time inside model forwards
    stopped: str = LIMIT     # why drafting ended (LIMIT, CONFIDENCE, ...)
    confidence: tuple[float, ...] = ()  # per token: what the confidence test read (model drafter only)
    source: str = ""         # LOOKUP or MODEL for a hybrid drafter's proposal; "" otherwise


def mix_uniform(q: torch.Tensor, noise: float) -> torch.Tensor:
    """(N, V) -> (N, V): (1 - e) q + e / V, the degraded draft distribution."""
    return q if not noise else (1 - noise) * q + noise / q.shape[-1]


def top_probability(logits: torch.Tensor) -> float:
    """The largest softmax probability of one row of raw logits: the draft's own confidence,
    untempered, so that it means the same at every temperature."""
    return float(torch.exp(-torch.logsumexp(logits - logits.max(), -1)))


class Drafter:
    """Interface. A drafter lives for one generation; it may keep state (a KV cache)."""

    cache: CachedLM | None = None

    def propose(self, context: list[int], k: int, sampling: SamplingConfig,
                generator: torch.Generator, confidence: float = 0.0, noise: float = 0.0) -> Proposal:
        """Up to ``k`` tokens after ``context``; a model drafter stops early after a token whose
        confidence is below ``confidence``; ``noise`` degrades q (see the module docstring)."""
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

    def propose(self, context, k, sampling, generator, confidence=0.0, noise=0.0) -> Proposal:
        return Proposal([], torch.zeros(0, self.vocab_size), stopped=NOTHING)


class ModelDrafter(Drafter):
    """A small causal LM drafting autoregressively with its own KV cache."""

    fast_greedy = True  # T = 0 without noise: argmax per token, q built once per round (benchmarks turn it off)

    def __init__(self, model, vocab_size: int, clock: Clock, stop_ids: frozenset[int] = frozenset()):
        self.cache, self.clock, self.stop_ids = CachedLM(model, vocab_size), clock, stop_ids

    def propose(self, context, k, sampling, generator, confidence=0.0, noise=0.0) -> Proposal:
        if sampling.greedy and not noise and self.fast_greedy:
            return self._propose_greedy(context, k, confidence)
        feed = context[len(self.cache):]  # the last context token, plus a token it missed
        tokens, dists, confidences, forward_s, stopped = [], [], [], 0.0, LIMIT
        for _ in range(k):
            t0 = self.clock()
            logits = self.cache.forward(feed, keep=1)     # (1, V)
            forward_s += self.clock() - t0
            q = mix_uniform(probs_from_logits(logits, sampling), noise)  # (1, V)
            # a degraded draft samples from q' even at T = 0: its argmax would not be a sample of q'
            token = int(sample(q, sampling.greedy and not noise, generator))
            tokens.append(token)
            dists.append(q)
            confidences.append(top_probability(logits[0]))
            feed = [token]
            if token in self.stop_ids:  # whatever follows a kept stop token is never emitted
                stopped = STOP_TOKEN
                break
            if confidence and confidences[-1] < confidence:
                stopped = CONFIDENCE
                break
        probs = torch.cat(dists) if dists else torch.zeros(0, self.cache.vocab_size)
        return Proposal(tokens, probs, forward_s, stopped, tuple(confidences))

    def _propose_greedy(self, context, k, confidence) -> Proposal:
        """T = 0 without noise: q is one-hot at the argmax, so the hot path per drafted token is
        the forward and one argmax; q, the NaN check and the confidences for the trace are built
        once per round from the stacked logits (the confidence only per token when it can stop
        the drafting)."""
        feed = context[len(self.cache):]
        tokens, rows, forward_s, stopped = [], [], 0.0, LIMIT
        for _ in range(k):
            t0 = self.clock()
            logits = self.cache.forward(feed, keep=1)     # (1, V)
            forward_s += self.clock() - t0
            token = int(logits[0].argmax())
            tokens.append(token)
            rows.append(logits)
            feed = [token]
            if token in self.stop_ids:
                stopped = STOP_TOKEN
                break
            if confidence and top_probability(logits[0]) < confidence:
                stopped = CONFIDENCE
                break
        if not tokens:
            return Proposal([], torch.zeros(0, self.cache.vocab_size), forward_s, stopped)
        logits = torch.cat(rows).float()                                          # (K, V)
        if torch.isnan(logits).any():
            raise NumericalError("the model produced NaN logits; try another precision (--precision float32)")
        probs = torch.nn.functional.one_hot(torch.tensor(tokens), logits.shape[-1]).float()  # (K, V)
        confidences = torch.exp(-torch.logsumexp(logits - logits.amax(-1, keepdim=True), -1))  # (K,)
        return Proposal(tokens, probs, forward_s, stopped, tuple(confidences.tolist()))


class LookupDrafter(Drafter):
    """Prompt lookup decoding (Saxena 2023): copy what followed the latest earlier occurrence of
    the context's last n-gram. Needs no second model; q is one-hot, so a token is kept with
    probability p(x) and greedy acceptance is exact. Proposes nothing when nothing matches.

    It reads only what a person sees: the user's prompt and the output. ``hidden`` marks the
    context positions it must not match or copy (the chat template's markup around the prompt,
    such as ``<|im_start|>assistant``); every generated token is visible."""

    def __init__(self, vocab_size: int, max_ngram: int = 3, min_ngram: int = 1, hidden: tuple[bool, ...] = ()):
        self.vocab_size, self.max_ngram, self.min_ngram = vocab_size, max_ngram, min_ngram
        self.hidden = hidden

    def propose(self, context, k, sampling, generator, confidence=0.0, noise=0.0) -> Proposal:
        copied = self._lookup(context, k)
        if not copied:
            return Proposal([], torch.zeros(0, self.vocab_size), stopped=NO_MATCH)
        one_hot = torch.zeros(len(copied), self.vocab_size)                  # (K, V)
        one_hot[torch.arange(len(copied)), torch.tensor(copied)] = 1.0
        probs = mix_uniform(one_hot, noise)                                  # (K, V)
        tokens = copied if not noise else draw(probs, generator).tolist()
        return Proposal(tokens, probs, stopped=LIMIT if len(tokens) == k else COPY_END)

    def _visible(self, start: int, end: int) -> bool:
        return not any(self.hidden[start:end])

    def _lookup(self, ctx: list[int], k: int) -> list[int]:
        for n in range(min(self.max_ngram, len(ctx) - 1), self.min_ngram - 1, -1):
            tail = ctx[-n:]
            if not self._visible(len(ctx) - n, len(ctx)):
                continue
            # latest earlier occurrence first: recent text predicts best
            for at in range(len(ctx) - n - 1, -1, -1):
                if ctx[at:at + n] == tail and self._visible(at, at + n):
                    follow = ctx[at + n:at + n + k]
                    # copy only the visible run that follows the match
                    end = next((i for i in range(len(follow)) if not self._visible(at + n + i, at + n + i + 1)),
                               len(follow))
                    if end:
                        return follow[:end]
        return []


class HybridDrafter(Drafter):
    """Prompt lookup where it finds something to copy, the draft model everywhere else.

    Copied text (a function name, a repeated line, an edited snippet) costs no draft forward at
    all (c = 0); elsewhere the model drafts as usual. Which one drafts depends on the context
    alone, never on the verifier, so the rule stays lossless: a lookup proposal carries its
    one-hot q, a model proposal the model's q. The model's cache simply catches up on the tokens
    it missed in its next forward."""

    def __init__(self, lookup: LookupDrafter, model: ModelDrafter, min_copy: int = 2):
        self.lookup, self.model, self.min_copy = lookup, model, min_copy
        self.cache = model.cache

    def propose(self, context, k, sampling, generator, confidence=0.0, noise=0.0) -> Proposal:
        copied = self.lookup._lookup(context, k)
        if len(copied) >= min(self.min_copy, k):
            p = self.lookup.propose(context, k, sampling, generator, confidence, noise)
            return Proposal(p.tokens, p.probs, p.forward_s, p.stopped, p.confidence, LOOKUP)
        p = self.model.propose(context, k, sampling, generator, confidence, noise)
        return Proposal(p.tokens, p.probs, p.forward_s, p.stopped, p.confidence, MODEL)
