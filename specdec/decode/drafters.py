"""Drafters: who proposes the tokens the verifier checks.

Contract: ``propose`` returns a :class:`~specdec.decode.proposal.Proposal` (here a chain of K tokens; a
token tree from :class:`~specdec.decode.tree.TreeDrafter`): the drafted ids *and exactly the distribution
each was sampled from*. The most repeated bug in the field is drafting by argmax while the ratio uses softmax q
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

from dataclasses import replace

import torch

from specdec.decode.proposal import Proposal, one_hot
from specdec.decode.sampling import (
    draw,
    host_read,
    numerics,
    probs_from_logits,
    raise_numerical,
    sample,
    to_device,
)
from specdec.model.devices import Clock
from specdec.model.lm import CachedLM
from specdec.options import SamplingConfig
from specdec.trace import DraftedBy, DraftStop


def mix_uniform(q: torch.Tensor, noise: float) -> torch.Tensor:
    """(N, V) -> (N, V): (1 - e) q + e / V, the degraded draft distribution."""
    return q if not noise else (1 - noise) * q + noise / q.shape[-1]


def top_probability(logits: torch.Tensor) -> float:
    """The largest softmax probability of one row of raw logits: the draft's own confidence,
    untempered, so that it means the same at every temperature."""
    return float(top_probabilities(logits[None])[0])


def top_probabilities(logits: torch.Tensor) -> torch.Tensor:
    """(R, V) raw logits -> (R,) float32 :func:`top_probability` of each row, left on the device."""
    logits = logits.detach().float()
    return torch.exp(-torch.logsumexp(logits - logits.amax(-1, keepdim=True), -1))


class Drafter:
    """Interface. A drafter lives for one generation; it may keep state (a KV cache)."""

    cache: CachedLM | None = None

    def propose(self, context: list[int], k: int, sampling: SamplingConfig,
                generator: torch.Generator, confidence: float = 0.0, noise: float = 0.0) -> Proposal:
        """A proposal of depth <= ``k`` after ``context`` (here a chain of up to ``k`` tokens); a model
        drafter stops early after a token whose confidence is below ``confidence``; ``noise`` degrades q
        (see the module docstring)."""
        raise NotImplementedError

    def prefill(self, prompt: list[int], cancelled=lambda: False) -> bool:
        return self.cache.prefill(prompt[:-1], cancelled) if self.cache is not None else True

    def reshape(self, width: int, nodes: int) -> None:
        """Draft the next round's tree at most ``width`` wide with at most ``nodes`` nodes (an adaptive run's
        choice, :mod:`specdec.decode.pacing`; width 1: a chain of ``nodes``). A chain drafter drafts chains."""

    def keep_path(self, path: list[int]) -> None:
        """Keep the cache entries of the accepted path (node indices in depth order): a chain's are in place."""

    def rollback(self, context: list[int]) -> None:
        if self.cache is not None:
            self.cache.rollback(context)


class NoDrafter(Drafter):
    """Proposes nothing: every round is one plain verifier step. The verifier-only baseline."""

    def __init__(self, vocab_size: int, device: torch.device | str = "cpu"):
        self.vocab_size, self.device = vocab_size, torch.device(device)

    def propose(self, context, k, sampling, generator, confidence=0.0, noise=0.0) -> Proposal:
        return Proposal.chain(context[-1], [], torch.zeros(1, self.vocab_size, device=self.device),
                              stopped=DraftStop.NOTHING)


class ModelDrafter(Drafter):
    """A small causal LM drafting autoregressively with its own KV cache.

    ``fast_greedy``: at T = 0 without noise, each token is the argmax of its logits and q is built
    once per round; off, the general path builds q and reads the confidence per token (the same
    proposal, slower: what benchmarks/levers.py measures the fast path against)."""

    def __init__(self, model, vocab_size: int, clock: Clock, stop_ids: frozenset[int] = frozenset(),
                 fast_greedy: bool = True):
        self.cache, self.clock, self.stop_ids = CachedLM(model, vocab_size), clock, stop_ids
        self.fast_greedy = fast_greedy

    def propose(self, context, k, sampling, generator, confidence=0.0, noise=0.0) -> Proposal:
        """One host read per drafted token (its id, with its confidence where the test reads it), the
        last one's left to the round's one read of the NaN test and the confidences. At T = 0 without
        noise (``fast_greedy``) each token is the argmax of its logits and q is built once per round."""
        fast = sampling.greedy and not noise and self.fast_greedy
        feed = context[len(self.cache):]  # the last context token, plus a token it missed
        tokens, ids, rows, dists, sure, forward_s, stopped = [], [], [], [], [], 0.0, DraftStop.LIMIT
        for _ in range(k):
            t0 = self.clock()
            logits = self.cache.forward(feed, keep=1)     # (1, V)
            forward_s += self.clock() - t0
            if fast:
                ids.append(logits.argmax(-1))             # (1,)
            else:
                q = mix_uniform(probs_from_logits(logits, sampling, check=False), noise)  # (1, V)
                # a degraded draft samples from q' even at T = 0: its argmax would not be a sample of q'
                ids.append(sample(q, sampling.greedy and not noise, generator))
                dists.append(q)
            rows.append(logits)
            if confidence:  # the test reads each token's confidence; otherwise all come in one call below
                sure.append(top_probabilities(logits))    # (1,)
            if len(ids) == k:
                break  # no forward waits for the last id: the round's read fetches it
            token, unsure = self._read(ids[-1], sure[-1] if confidence else None, confidence)
            tokens.append(token)
            feed = [token]
            stopped = self._stop(token, unsure)
            if stopped != DraftStop.LIMIT:
                break
        if not ids:
            return Proposal.chain(context[-1], [], torch.zeros(1, self.cache.vocab_size, device=self.cache.device),
                                  forward_s, stopped)
        ids_k = torch.cat(ids)                                                    # (K,)
        V = rows[0].shape[-1]
        probs = one_hot(ids_k, V) if fast else torch.cat(dists + [dists[0].new_zeros(1, V)])  # (K+1, V) a leaf last
        # the round's one read: the ids not read yet, the NaN test of the (K, V) logits and q, the confidences
        logits = torch.cat(rows)                                                  # (K, V)
        flags = numerics(logits, None if fast else probs)                         # (2,)
        *got, nan, bad = host_read(torch.cat(sure) if confidence else top_probabilities(logits),
                                   ids_k[len(tokens):], flags)
        raise_numerical(nan, bad, sampling)
        confidences = tuple(got[:len(ids)])
        if len(tokens) < len(ids):  # the K-th token: whatever it is, drafting ends; why is recorded
            tokens.append(int(got[-1]))
            stopped = self._stop(tokens[-1], bool(confidence) and confidences[-1] < confidence)
        return Proposal.chain(context[-1], tokens, probs, forward_s, stopped, confidences)

    @staticmethod
    def _read(token: torch.Tensor, sure: torch.Tensor | None, confidence: float) -> tuple[int, bool]:
        """The drafted id, and whether the confidence test stops after it: ONE host read for both
        (float32 holds every id < 2^24 exactly)."""
        if not confidence:
            return int(token), False
        token, sure = host_read(token, sure)
        return int(token), sure < confidence

    def _stop(self, token: int, unsure: bool) -> DraftStop:
        if token in self.stop_ids:  # whatever follows a kept stop token is never emitted
            return DraftStop.STOP_TOKEN
        return DraftStop.CONFIDENCE if unsure else DraftStop.LIMIT


class LookupDrafter(Drafter):
    """Prompt lookup decoding (Saxena 2023): copy what followed the latest earlier occurrence of
    the context's last n-gram. Needs no second model; q is one-hot, so a token is kept with
    probability p(x) and greedy acceptance is exact. Proposes nothing when nothing matches.

    It reads only what a person sees: the user's prompt and the output. ``hidden`` marks the
    context positions it must not match or copy (the chat template's markup around the prompt,
    such as ``<|im_start|>assistant``); every generated token is visible."""

    def __init__(self, vocab_size: int, max_ngram: int = 3, min_ngram: int = 1, hidden: tuple[bool, ...] = (),
                 device: torch.device | str = "cpu"):
        self.vocab_size, self.max_ngram, self.min_ngram = vocab_size, max_ngram, min_ngram
        self.hidden, self.device = hidden, torch.device(device)

    def propose(self, context, k, sampling, generator, confidence=0.0, noise=0.0) -> Proposal:
        copied = self._lookup(context, k)
        if not copied:
            return Proposal.chain(context[-1], [], torch.zeros(1, self.vocab_size, device=self.device),
                                  stopped=DraftStop.NO_MATCH)
        probs = one_hot(to_device(copied, self.device), self.vocab_size)    # (K+1, V) a leaf last
        if noise:
            probs[:-1] = mix_uniform(probs[:-1], noise)
        tokens = copied if not noise else draw(probs[:-1], generator).tolist()
        stopped = DraftStop.LIMIT if len(tokens) == k else DraftStop.COPY_END
        return Proposal.chain(context[-1], tokens, probs, stopped=stopped)

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
            copy = self.lookup.propose(context, k, sampling, generator, confidence, noise)
            return replace(copy, source=DraftedBy.LOOKUP)
        return replace(self.model.propose(context, k, sampling, generator, confidence, noise), source=DraftedBy.MODEL)
