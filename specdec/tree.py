"""Token trees: draft several continuations at once and verify them all in one forward.

A chain wastes the rest of its round at the first position where the draft's one guess is wrong,
although its second or third choice there is often the verifier's token. A tree keeps several
(SpecInfer, Miao et al. 2023; EAGLE-2, Li et al. 2024):

- **Drafting** (:class:`TreeDrafter`) expands the tree depth by depth from the last context
  token (the root). At each depth the W most probable nodes of the frontier under the draft's
  *path probability* (the product of q along the path, EAGLE-2's ranking) are expanded, in one
  batched draft forward in which each row sees the context and its own ancestors; each gets W
  children: the top W of q at temperature 0, otherwise W draws *without replacement* from q,
  in draw order. The tree stops at depth K, or when it holds N nodes (the budget).
- **Verification**: one verifier forward over all N + 1 nodes with tree attention
  (:class:`~specdec.qwen2.TreeAttention`), so each node's p is what a chain along its path gives.
- **Acceptance**: :func:`specdec.rule.verify_tree` (recursive rejection sampling; VerifyGreedy at
  temperature 0).
- **Cache**: both caches then keep only the accepted path (:meth:`specdec.cache.CachedLM.keep`).

Lossless by construction: how many children a node gets is decided before they are drawn (from
the draft alone: the node's path probability and the budget), and its children are kept in draw
order, so a child's presence never depends on its own value. (Pruning drafted children by their
own probability, EAGLE-2's final re-ranking, would bias the test at temperature > 0.)

Node 0 is the root; ``parents[j] < j``; a node's children are its children in index order.
Shapes: N drafted nodes, W width, V vocabulary entries.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .cache import CachedLM
from .config import SamplingConfig
from .devices import Clock
from .drafters import CONFIDENCE, LIMIT, STOP_TOKEN, Drafter, mix_uniform, top_probability
from .qwen2 import TreeAttention
from .sampling import NumericalError, draw, probs_from_logits

COVER = 0.9  # a node's children cover this much of its q, as far as the width allows
BUDGET = "budget"  # the tree stopped growing at its node budget (LIMIT: at depth K)


@dataclass(frozen=True)
class TreeProposal:
    parents: tuple[int, ...]   # (N+1,) parents[0] == -1: node 0 is the root, the last context token
    tokens: tuple[int, ...]    # (N+1,) tokens[0] is the root's token
    probs: torch.Tensor        # (N+1, V) row j: the q node j's children were drawn from (zeros if none)
    path_q: tuple[float, ...]  # (N+1,) the draft's path probability, by which nodes were ranked
    forward_s: float = 0.0
    stopped: str = LIMIT       # LIMIT (depth K), BUDGET, CONFIDENCE or STOP_TOKEN (nothing left to expand)
    width: int = 1
    budget: int = 0

    @property
    def n(self) -> int:
        return len(self.parents) - 1


def depths(parents) -> list[int]:
    out = [0] * len(parents)
    for j in range(1, len(parents)):
        out[j] = out[parents[j]] + 1
    return out


def ancestors(parents, j: int) -> list[int]:
    """Root .. j inclusive, in depth order."""
    path = [j]
    while parents[path[-1]] >= 0:
        path.append(parents[path[-1]])
    return path[::-1]


def children(parents) -> list[list[int]]:
    kids: list[list[int]] = [[] for _ in parents]
    for j in range(1, len(parents)):
        kids[parents[j]].append(j)
    return kids


def verifier_attention(parents, cached: int) -> TreeAttention:
    """The verifier's view of a tree fed as rows cached .. cached + N: row j (at cache index
    cached + j, position cached + depth j) sees the ``cached`` context entries and its ancestors.
    A row whose ancestors are exactly the rows before it (the first-child path, in depth-first
    order) sees a prefix of the cache: it is given as a length, and attends to a view, uncopied."""
    d = depths(parents)
    ctx = torch.arange(cached)
    keys = []
    for j in range(len(parents)):
        anc = ancestors(parents, j)
        keys.append(cached + j + 1 if anc == list(range(j + 1)) else torch.cat([ctx, cached + torch.tensor(anc)]))
    return TreeAttention(cached + torch.tensor(d), tuple(keys), exact=True)


def depth_first(parents) -> list[int]:
    """The nodes in depth-first order, children in their order: parents still come before their
    children and siblings keep their order, and the first-child path is rows 0, 1, 2, ..."""
    kids, order, stack = children(parents), [], [0]
    while stack:
        j = stack.pop()
        order.append(j)
        stack.extend(reversed(kids[j]))
    return order


def mask_grid(parents) -> list[list[bool]]:
    """(N+1, N+1): node i attends to node j (the tree part of the verifier's mask)."""
    anc = [set(ancestors(parents, i)) for i in range(len(parents))]
    return [[j in anc[i] for j in range(len(parents))] for i in range(len(parents))]


def draw_without_replacement(q: torch.Tensor, n: int, generator: torch.Generator) -> list[int]:
    """(V,) -> up to n distinct tokens, each drawn from q with the earlier ones removed and the
    rest renormalised: the order recursive rejection sampling tests them in."""
    q = q.clone()
    out: list[int] = []
    for _ in range(min(n, int((q > 0).sum()))):
        tok = int(draw(q[None] / q.sum(), generator)[0])
        out.append(tok)
        q[tok] = 0
    return out


def require_lean(pair) -> None:
    """Token trees need the lean Qwen2 forward in both models (tree attention, a cache that keeps a path)."""
    from .config import ConfigError
    from .qwen2 import LeanQwen2
    if pair.draft is None:
        raise ConfigError("drafter 'tree' needs a draft model; load one or use drafter 'lookup'", "drafter")
    if not (isinstance(pair.target, LeanQwen2) and isinstance(pair.draft, LeanQwen2)):
        raise ConfigError("drafter 'tree' needs the lean Qwen2 forward (Qwen2 models on the CPU); "
                          "use drafter 'model' for these models", "drafter")


class TreeDrafter(Drafter):
    """The draft model drafting a token tree of width W, at most N nodes and depth K."""

    def __init__(self, model, vocab_size: int, clock: Clock, width: int, nodes: int,
                 stop_ids: frozenset[int] = frozenset()):
        self.cache = CachedLM(model, vocab_size)
        if not self.cache.lean:
            raise TypeError("token trees need the lean Qwen2 forward")
        self.clock, self.width, self.nodes, self.stop_ids = clock, width, nodes, stop_ids
        self._fed: tuple[int, list[int]] = (0, [])  # the context length, and each node's draft-cache index

    def propose(self, context, k, sampling, generator, confidence=0.0, noise=0.0) -> TreeProposal:
        """A tree of depth <= k. With ``confidence`` > 0 it stops growing after a depth where even
        its most probable expanded node's draft was less sure than that (its untempered top
        probability): the chain's adaptive stop, which a width-1 tree then follows exactly."""
        W, V = self.width, self.cache.vocab_size
        parents, tokens, path_q, rows, fed = [-1], [context[-1]], [1.0], [None], [-1]
        forward_s, t0 = 0.0, self.clock()
        logits = self.cache.forward(context[len(self.cache):], keep=1)                 # (1, V)
        forward_s += self.clock() - t0
        start = len(self.cache)  # == len(context): the root is cached now
        rows[0], sure = self._q(logits, sampling, noise)[0], [top_probability(logits[0])]
        frontier, stopped = [0], LIMIT
        for depth in range(1, k + 1):
            new = []
            for j in frontier:
                room = self.nodes - (len(parents) - 1)
                if room <= 0:
                    stopped = BUDGET
                    break
                for tok in self._children(rows[j], min(self._count(rows[j]), room), sampling, noise, generator):
                    parents.append(j)
                    tokens.append(tok)
                    path_q.append(path_q[j] * float(rows[j][tok]))
                    rows.append(None)
                    fed.append(-1)
                    new.append(len(parents) - 1)
            expand = sorted((j for j in new if tokens[j] not in self.stop_ids), key=lambda j: -path_q[j])[:W]
            if depth == k or stopped == BUDGET or len(parents) - 1 >= self.nodes:
                stopped = stopped if depth == k else BUDGET
                break
            if not expand:
                stopped = STOP_TOKEN
                break
            if confidence and sure[0] < confidence:  # the best path's last draft was unsure: go no deeper
                stopped = CONFIDENCE
                break
            # one batched draft forward over the nodes to expand: each sees the context and its ancestors
            base = len(self.cache)
            for i, j in enumerate(expand):
                fed[j] = base + i
            keys = tuple(torch.tensor(list(range(start)) + [fed[a] for a in ancestors(parents, j)[1:]])
                         for j in expand)
            att = TreeAttention(torch.tensor([start - 1 + depth] * len(expand)), keys, exact=False)
            t0 = self.clock()
            logits = self.cache.forward_tree([tokens[j] for j in expand], att)         # (W, V)
            forward_s += self.clock() - t0
            for j, q in zip(expand, self._q(logits, sampling, noise)):
                rows[j] = q
            sure = [top_probability(row) for row in logits]  # expand is sorted best first
            frontier = expand
        # renumber depth-first: the verifier then reads the first-child path's keys without a copy
        order = depth_first(parents)
        new_index = {old: i for i, old in enumerate(order)}
        parents = [-1] + [new_index[parents[j]] for j in order[1:]]
        probs = torch.stack([rows[j] if rows[j] is not None else torch.zeros(V) for j in order])  # (N+1, V)
        self._fed = (start, [fed[j] for j in order])
        return TreeProposal(tuple(parents), tuple(tokens[j] for j in order), probs, tuple(path_q[j] for j in order),
                            forward_s, stopped, W, self.nodes)

    def _count(self, q: torch.Tensor) -> int:
        """How many children a node gets: the fewest of q's top tokens that hold ``COVER`` of its
        mass, at most W. Where the draft is sure, one child (the tree grows deep, as a chain);
        where it hesitates, up to W. Decided from q alone, before any child is drawn."""
        top = q.topk(self.width).values.cumsum(0)                                  # (W,)
        return min(self.width, int((top < COVER).sum()) + 1)

    def _q(self, logits: torch.Tensor, sampling: SamplingConfig, noise: float) -> torch.Tensor:
        """(R, V) logits -> (R, V): the q children are drawn from. At temperature 0 the children
        are q's top W and the rule ignores q, so it is the draft's untempered softmax, which ranks
        the paths; otherwise the warped (and degraded) q they are sampled from."""
        if torch.isnan(logits).any():
            raise NumericalError("the model produced NaN logits; try another precision (--precision float32)")
        if sampling.greedy and not noise:
            return torch.softmax(logits.float(), -1)
        return mix_uniform(probs_from_logits(logits, sampling), noise)

    def _children(self, q: torch.Tensor, n: int, sampling: SamplingConfig, noise: float,
                  generator: torch.Generator) -> list[int]:
        if sampling.greedy and not noise:
            return q.topk(n).indices.tolist()
        return draw_without_replacement(q, n, generator)

    def keep_path(self, path: list[int]) -> None:
        """Keep the draft cache's entries of the accepted path (those it fed: a prefix of it)."""
        start, fed = self._fed
        self.cache.keep(start, [fed[j] for j in path if fed[j] >= 0])
