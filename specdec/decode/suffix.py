"""The suffix tree drafter: a token tree of what followed the context's last tokens wherever they
were written before (SuffixDecoding, Oliaro et al. 2024, arXiv:2411.04975), with no second model.

Where the context's last p tokens (the *match*, at most :data:`MAX_MATCH`) occurred before, in the
prompt, this run's output or an earlier run of the session (the :class:`SuffixPool`, shared by the
runs of one process, as llama.cpp's n-gram pools are shared by its requests), each occurrence is
followed by a continuation. Those continuations, merged into a trie, give every node a count: how
many occurrences continue that way. The drafter proposes the nodes of highest share (count over
occurrences, the empirical probability of the path), at most W children a node and K deep, as
many as :data:`ALPHA` times the match length allows (SuffixDecoding's rule: a longer match is
surer evidence, so it buys a larger tree), at most the run's node cap. Children are ordered by
count, and the nodes depth-first, so the most frequent continuation is the tree's first-child line.

Nothing is drawn: each node is the drafter's choice from the context alone, so its q is one-hot at
its own token and the rule keeps it with probability p(x) (the residual after a rejection: p with
x removed). Lossless as prompt lookup is, at any temperature; at T = 0 the verifier's greedy walk.

Which tokens it may read and copy is prompt lookup's rule: only what a person sees (the user's
prompt, every output), never the chat template's markup around the prompt.

Shapes: N drafted nodes, V vocabulary entries.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace

import torch

from specdec.decode.drafters import Drafter, ModelDrafter
from specdec.decode.proposal import Proposal, one_hot
from specdec.decode.sampling import to_device
from specdec.trace import DraftedBy, DraftStop

MAX_MATCH = 16       # the longest context tail it matches: past this, more history says little more
MIN_MATCH = 2        # a shorter match proposes nothing (one common token is weak evidence of a copy)
ALPHA = 2.0          # nodes per matched token (SuffixDecoding's alpha): a p-token match buys alpha * p nodes
WIDTH = 3            # the most children of one node
MIN_SHARE = 0.1      # a branch followed by fewer than this share of the occurrences is not proposed
MAX_OCCURRENCES = 256  # the most recent occurrences of the last token it extends, per document
POOL_TOKENS = 200_000  # the pool forgets its oldest runs past this many tokens
MIN_COPY = 3         # suffix, else model: the match the suffix tree needs to draft instead of the model


@dataclass
class Document:
    """Token ids one could copy from, and where each visible token occurs (most recent last)."""

    tokens: list[int] = field(default_factory=list)
    visible: list[bool] = field(default_factory=list)
    where: dict[int, list[int]] = field(default_factory=dict)

    def extend(self, tokens: list[int], hidden: tuple[bool, ...] = ()) -> None:
        for tok in tokens:
            i = len(self.tokens)
            seen = not (i < len(hidden) and hidden[i])
            self.tokens.append(tok)
            self.visible.append(seen)
            if seen:
                self.where.setdefault(tok, []).append(i)

    def __len__(self) -> int:
        return len(self.tokens)


class SuffixPool:
    """The documents of a session's earlier runs (their prompts as a person sees them and their outputs),
    for one tokenizer. A run's document joins the pool when its drafter is made and grows with the run."""

    def __init__(self, max_tokens: int = POOL_TOKENS):
        self.documents: list[Document] = []
        self.max_tokens, self._lock = max_tokens, threading.Lock()

    def add(self, doc: Document) -> None:
        with self._lock:
            self.documents.append(doc)
            while len(self.documents) > 1 and sum(len(d) for d in self.documents) > self.max_tokens:
                self.documents.pop(0)

    def others(self, doc: Document) -> list[Document]:
        with self._lock:
            return [d for d in self.documents if d is not doc]

    def clear(self) -> None:
        with self._lock:
            self.documents.clear()

    @property
    def tokens(self) -> int:
        return sum(len(d) for d in self.documents)


_POOLS: dict[str, SuffixPool] = {}
_POOLS_LOCK = threading.Lock()


def session_pool(vocabulary: str) -> SuffixPool:
    """The process's pool for one vocabulary (the verifier's name: its tokenizer's ids)."""
    with _POOLS_LOCK:
        return _POOLS.setdefault(vocabulary, SuffixPool())


@dataclass(frozen=True)
class Match:
    """Where the context's last ``length`` tokens occurred before: (document, index of the occurrence's
    last token) for each, and what followed each (at most K tokens)."""

    length: int
    continuations: tuple[tuple[int, ...], ...]


class SuffixDrafter(Drafter):
    """Proposes the tree of what followed the context's tail wherever it occurred (module docstring).
    ``pool``: earlier runs to read as well (None: this run's context only); ``nodes``: the most nodes of
    a round's tree (the run's cap; the match's ALPHA * p is the other)."""

    def __init__(self, vocab_size: int, hidden: tuple[bool, ...] = (), pool: SuffixPool | None = None,
                 nodes: int = 12, width: int = WIDTH, device: torch.device | str = "cpu"):
        self.vocab_size, self.hidden, self.pool = vocab_size, hidden, pool
        self.nodes, self.width, self.device = nodes, width, torch.device(device)
        self.doc = Document()
        if pool is not None:
            pool.add(self.doc)

    def propose(self, context, k, sampling, generator, confidence=0.0, noise=0.0) -> Proposal:
        self.doc.extend(context[len(self.doc):], self.hidden)
        match = self.match(k)
        if match.length < MIN_MATCH or not match.continuations:
            return replace(Proposal.chain(context[-1], [], torch.zeros(1, self.vocab_size, device=self.device),
                                          stopped=DraftStop.NO_MATCH), match=match.length)
        budget = max(1, min(self.nodes, int(ALPHA * match.length)))
        parents, tokens, shares = tree_of(match.continuations, k, budget, self.width)
        if len(tokens) == 0:
            return replace(Proposal.chain(context[-1], [], torch.zeros(1, self.vocab_size, device=self.device),
                                          stopped=DraftStop.NO_MATCH), match=match.length)
        ids = to_device(tokens, self.device)                                        # (N,)
        if all(a == j for j, a in enumerate(parents)):  # a chain: one-hot rows, as prompt lookup's
            probs = one_hot(ids, self.vocab_size)                                   # (N+1, V)
        else:  # row j one-hot at node j's first child (what a chain view reads); the rule reads none of them
            probs = torch.zeros(len(tokens) + 1, self.vocab_size, device=self.device)
            first = {}
            for j, a in enumerate(parents, start=1):
                first.setdefault(a, j)
            for a, j in first.items():
                probs[a, tokens[j - 1]] = 1.0
        depth = _depths(parents)
        stopped = DraftStop.LIMIT if max(depth) == k else DraftStop.COPY_END
        return Proposal((-1, *parents), (context[-1], *tokens), probs, stopped=stopped, width=self.width,
                        budget=budget, path_q=(1.0, *shares), one_hot_nodes=True, match=match.length)

    def match(self, k: int) -> Match:
        """The longest tail of this run's context (at most MAX_MATCH) that occurred before, here or in
        the pool, and what followed each of its occurrences."""
        doc, best, found = self.doc, 0, []
        ctx, end = doc.tokens, len(doc) - 1
        if end < 1 or not doc.visible[end]:
            return Match(0, ())
        docs = [doc] + (self.pool.others(doc) if self.pool is not None else [])
        for d in docs:
            limit = end if d is doc else len(d)  # in this run, the occurrences before its last token
            for i in reversed(d.where.get(ctx[end], [])[-MAX_OCCURRENCES:]):
                if i >= limit or i + 1 >= len(d) or not d.visible[i + 1]:
                    continue  # nothing visible follows it
                m = 1
                while (m < MAX_MATCH and i - m >= 0 and end - m >= 0 and d.tokens[i - m] == ctx[end - m]
                       and d.visible[i - m] and doc.visible[end - m]):
                    m += 1
                if m > best:
                    best, found = m, []
                if m == best:
                    found.append((d, i))
        continuations = []
        for d, i in found:
            follow = []
            for t in range(i + 1, i + 1 + k):
                if t < len(d):
                    if not d.visible[t]:
                        break
                    follow.append(d.tokens[t])
                elif d is doc:  # an occurrence overlapping the tail (a repeat): what follows it is this copy
                    follow.append(follow[t - len(d)])
                else:
                    break
            if follow:
                continuations.append(tuple(follow))
        return Match(best, tuple(continuations))


def tree_of(continuations, k: int, budget: int, width: int) -> tuple[list[int], list[int], list[float]]:
    """The trie of ``continuations`` cut to the ``budget`` nodes of highest share (count over
    occurrences; ties: the shallower, then the more recent), at most ``width`` children a node and
    ``k`` deep, none below MIN_SHARE; returned depth-first with children by count: each node's parent
    (0 the root, node j at index j - 1), token and share."""
    total = len(continuations)
    counts: dict[tuple[int, ...], int] = {}
    for c in continuations:
        for d in range(1, min(k, len(c)) + 1):
            counts[c[:d]] = counts.get(c[:d], 0) + 1
    chosen: set[tuple[int, ...]] = set()
    kids: dict[tuple[int, ...], list[tuple[int, ...]]] = {(): []}
    frontier = [path for path in counts if len(path) == 1]
    while frontier and len(chosen) < budget:
        # the best node whose parent is in: shares fall along a path, so this is the top of all that remain
        path = max(frontier, key=lambda s: (counts[s], -len(s)))
        frontier.remove(path)
        if counts[path] / total < MIN_SHARE or len(kids[path[:-1]]) >= width:
            continue
        chosen.add(path)
        kids[path[:-1]].append(path)
        kids[path] = []
        frontier += [s for s in counts if len(s) == len(path) + 1 and s[:-1] == path]
    parents, tokens, shares, index = [], [], [], {(): 0}
    stack = [(), ]
    order = []
    while stack:  # depth-first, children by count (the most frequent continuation is the first-child line)
        node = stack.pop()
        if node:
            order.append(node)
        stack.extend(sorted(kids[node], key=lambda s: counts[s]))  # popped in descending count
    for node in order:
        index[node] = len(tokens) + 1
        parents.append(index[node[:-1]])
        tokens.append(node[-1])
        shares.append(counts[node] / total)
    return parents, tokens, shares


def _depths(parents: list[int]) -> list[int]:
    """Depths of nodes 1..N given their parents (0 the root)."""
    out = [0]
    for a in parents:
        out.append(out[a] + 1)
    return out[1:]


class SuffixElseModel(Drafter):
    """The suffix tree where the context's tail matched at least MIN_COPY tokens earlier, the draft model
    everywhere else (as the hybrid drafter composes prompt lookup with it). Which one drafts depends on
    the context alone: lossless. The model's cache catches up on the tokens it missed in its next forward."""

    def __init__(self, suffix: SuffixDrafter, model: ModelDrafter, min_copy: int = MIN_COPY):
        self.suffix, self.model, self.min_copy = suffix, model, min_copy
        self.cache = model.cache

    def propose(self, context, k, sampling, generator, confidence=0.0, noise=0.0) -> Proposal:
        copy = self.suffix.propose(context, k, sampling, generator, confidence, noise)
        if copy.n and copy.match >= min(self.min_copy, k + 1):
            return replace(copy, source=DraftedBy.SUFFIX)
        return replace(self.model.propose(context, k, sampling, generator, confidence, noise),
                       source=DraftedBy.MODEL, match=copy.match)
