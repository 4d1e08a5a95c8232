"""Token trees: draft several continuations at once and verify them all in one forward.

A chain wastes the rest of its round at the first position where the draft's one guess is wrong,
although its second or third choice there is often the verifier's token. A tree keeps several
(SpecInfer, Miao et al. 2023; EAGLE-2, Li et al. 2024):

- **Drafting** (:class:`TreeDrafter`) expands the tree depth by depth from the last context
  token (the root). At each depth the W most probable nodes of the frontier under the draft's
  *path probability* (the product of q along the path, EAGLE-2's ranking) are expanded, in one
  batched draft forward in which each row sees the context and its own ancestors; each gets the
  fewest of q's top tokens that cover COVER of q, at most W (counted before any child is drawn):
  those top tokens at temperature 0, otherwise that many draws *without replacement* from q, in
  draw order. The tree stops at depth K, or when it holds N nodes (the budget).
- **Verification**: one verifier forward over all N + 1 nodes with tree attention
  (:class:`~specdec.model.qwen2.TreeAttention`), so each node's p is what a chain along its path gives.
- **Acceptance**: :func:`specdec.decode.rule.verify_tree` (recursive rejection sampling; VerifyGreedy at
  temperature 0).
- **Cache**: both caches then keep only the accepted path (:meth:`specdec.model.lm.CachedLM.keep`).

Lossless by construction: the condition is that each child's presence is settled before that
child is drawn (it may depend on the earlier siblings, never on its own value) and children are
tested in draw order. Here it holds in its simplest form: how many children a node gets is decided
before any is drawn (from the draft alone: the node's path probability and the budget). Pruning
drawn children by their own probability (EAGLE-2's final step keeps only its best-scoring nodes), or
testing them in another order than drawn, would bias this rule at temperature > 0; notebook 06,
section 3, checks both by exact enumeration.

A tree is a :class:`~specdec.decode.proposal.Proposal` like every drafter's (a chain is the tree whose
node j has parent j - 1); its structure (children, depths, ancestors, the attention mask) is here.
Node 0 is the root; ``parents[j] < j``; a node's children are its children in index order.
Shapes: N drafted nodes, W width, V vocabulary entries.
"""
from __future__ import annotations

import torch

from specdec.decode.drafters import Drafter, mix_uniform, top_probabilities
from specdec.decode.proposal import Proposal, ancestors, children, depths
from specdec.decode.sampling import (
    draw,
    host_read,
    numerics,
    probs_from_logits,
    raise_numerical,
)
from specdec.model.devices import Clock
from specdec.model.lm import CachedLM
from specdec.model.qwen2 import LeanQwen2, TreeAttention
from specdec.options import SamplingConfig
from specdec.trace import DraftStop

COVER = 0.9  # a node's children cover this much of its q, as far as the width allows


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


def draw_without_replacement(q: torch.Tensor, n: int, generator: torch.Generator) -> torch.Tensor:
    """(V,) q with at least n tokens of mass -> (n,) distinct tokens on q's device, each drawn from q
    with the earlier ones removed and the rest renormalised: the order recursive rejection sampling
    tests them in. No host read: the caller reads them with the round's other numbers."""
    q = q.clone()
    out = []
    for _ in range(n):
        tok = draw(q[None] / q.sum(), generator)                              # (1,)
        out.append(tok)
        q.scatter_(0, tok, 0.0)
    return torch.cat(out) if out else torch.zeros(0, dtype=torch.long, device=q.device)


def require_lean(pair) -> None:
    """Token trees need the lean Qwen2 forward in both models (tree attention, a cache that keeps a path)."""
    from specdec.options import ConfigError
    if pair.draft is None:
        raise ConfigError("drafter 'tree' needs a draft model; load one or use drafter 'lookup'", "drafter")
    if not (isinstance(pair.target, LeanQwen2) and isinstance(pair.draft, LeanQwen2)):
        raise ConfigError("drafter 'tree' needs the lean Qwen2 forward (Qwen2 models on the CPU); "
                          "use drafter 'model' for these models", "drafter")


class TreeDrafter(Drafter):
    """The draft model drafting a token tree of width W, at most N nodes and depth K."""

    def __init__(self, model, vocab_size: int, clock: Clock, width: int, nodes: int,
                 stop_ids: frozenset[int] = frozenset()):
        if not isinstance(model, LeanQwen2):
            raise TypeError("token trees need the lean Qwen2 forward")
        self.cache = CachedLM(model, vocab_size)
        self.clock, self.width, self.nodes, self.stop_ids = clock, width, nodes, stop_ids
        self._fed: tuple[int, list[int]] = (0, [])  # the context length, and each node's draft-cache index

    def propose(self, context, k, sampling, generator, confidence=0.0, noise=0.0) -> Proposal:
        """A tree of depth <= k. With ``confidence`` > 0 it stops growing after a depth where even
        its most probable expanded node's draft was less sure than that (its untempered top
        probability): the chain's adaptive stop, which a width-1 tree then follows exactly."""
        W, V = self.width, self.cache.vocab_size
        parents, tokens, path_q, rows, fed = [-1], [context[-1]], [1.0], [None], [-1]
        forward_s, t0 = 0.0, self.clock()
        logits = self.cache.forward(context[len(self.cache):], keep=1)                 # (1, V)
        forward_s += self.clock() - t0
        start = len(self.cache)  # == len(context): the root is cached now
        q, (sure, counts, tops) = self._q(logits, sampling, noise)
        rows[0], frontier, stopped = q[0], [0], DraftStop.LIMIT
        row_sure = {0: sure[0]}  # per expanded node: the confidence its children were drawn with
        for depth in range(1, k + 1):
            # how many children each frontier node gets is decided before any is drawn (see the docstring)
            planned = []
            for i, j in enumerate(frontier):
                room = self.nodes - (len(parents) - 1) - sum(n for _, _, n in planned)
                if room <= 0:
                    stopped = DraftStop.TREE_BUDGET
                    break
                planned.append((i, j, min(counts[i], room)))
            first = len(parents)
            for _, j, n in planned:
                parents += [j] * n
            ids, q_ids = self._children(rows, tops, planned, sampling, noise, generator)
            tokens += ids
            path_q += [path_q[parents[c]] * x for c, x in enumerate(q_ids, first)]
            new = list(range(first, len(parents)))
            rows += [None] * len(new)
            fed += [-1] * len(new)
            expand = sorted((j for j in new if tokens[j] not in self.stop_ids), key=lambda j: -path_q[j])[:W]
            if depth == k or stopped == DraftStop.TREE_BUDGET or len(parents) - 1 >= self.nodes:
                stopped = stopped if depth == k else DraftStop.TREE_BUDGET
                break
            if not expand:
                stopped = DraftStop.STOP_TOKEN
                break
            if confidence and sure[0] < confidence:  # the best path's last draft was unsure: go no deeper
                stopped = DraftStop.CONFIDENCE
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
            q, (sure, counts, tops) = self._q(logits, sampling, noise)  # expand is sorted best first
            for j, row, c in zip(expand, q, sure):
                rows[j], row_sure[j] = row, c
            frontier = expand
        # renumber depth-first: the verifier then reads the first-child path's keys without a copy
        order = depth_first(parents)
        new_index = {old: i for i, old in enumerate(order)}
        parents = [-1] + [new_index[parents[j]] for j in order[1:]]
        none = torch.zeros(V, device=rows[0].device)
        probs = torch.stack([rows[j] if rows[j] is not None else none for j in order])  # (N+1, V)
        self._fed = (start, [fed[j] for j in order])
        # a width-1 tree is a chain: each token with the confidence the chain's test reads (its row's)
        confidence = tuple(row_sure[j - 1] for j in range(1, len(parents))) if W == 1 else ()
        return Proposal(tuple(parents), tuple(tokens[j] for j in order), probs, forward_s, stopped, confidence,
                        path_q=tuple(path_q[j] for j in order), width=W, budget=self.nodes)

    def _q(self, logits: torch.Tensor, sampling: SamplingConfig, noise: float):
        """(R, V) logits of the nodes just fed -> (R, V) q their children are drawn from, and ONE host
        read of what the host decides with: per row its confidence (the untempered top probability),
        its number of children and its top W (ids, q). At temperature 0 the children are q's top W and
        the rule ignores q, so q is the draft's untempered softmax, which ranks the paths; otherwise the
        warped (and degraded) q they are sampled from.

        A node's number of children is the fewest of q's top tokens that hold ``COVER`` of its mass, at
        most W (and, sampled, at most its tokens with mass). Where the draft is sure, one child (the tree
        grows deep, as a chain); where it hesitates, up to W. Decided from q alone, before any is drawn."""
        greedy = sampling.greedy and not noise
        if greedy:
            q = torch.softmax(logits.float(), -1)                                      # (R, V)
        else:
            q = mix_uniform(probs_from_logits(logits, sampling, check=False), noise)   # (R, V)
        top = q.topk(self.width, dim=-1)                                               # (R, W) each
        counts = ((top.values.cumsum(-1) < COVER).sum(-1) + 1).clamp_max(self.width)  # (R,)
        if not greedy:
            counts = torch.minimum(counts, (q > 0).sum(-1))
        R, W = logits.shape[0], self.width
        nan, bad, *got = host_read(numerics(logits, None if greedy else q), top_probabilities(logits), counts,
                                   top.indices, top.values)
        raise_numerical(nan, bad, sampling)
        ids, vals = got[2 * R:2 * R + R * W], got[2 * R + R * W:]
        tops = [(ids[i * W:(i + 1) * W], vals[i * W:(i + 1) * W]) for i in range(R)]
        return q, (got[:R], [int(c) for c in got[R:2 * R]], tops)

    def _children(self, rows, tops, planned, sampling: SamplingConfig, noise: float,
                  generator: torch.Generator) -> tuple[list[int], list[float]]:
        """The children of each planned (row, node, n) in draw order and their q: q's top n at
        temperature 0 (read with q), else n draws without replacement, read in ONE host read."""
        if sampling.greedy and not noise:
            ids = [int(x) for i, _, n in planned for x in tops[i][0][:n]]
            return ids, [x for i, _, n in planned for x in tops[i][1][:n]]
        drawn = [draw_without_replacement(rows[j], n, generator) for _, j, n in planned]
        if not drawn:
            return [], []
        got = host_read(*drawn, *(rows[j][d] for (_, j, _), d in zip(planned, drawn)))
        half = len(got) // 2
        return [int(x) for x in got[:half]], got[half:]

    def reshape(self, width: int, nodes: int) -> None:
        self.width, self.nodes = width, nodes

    def keep_path(self, path: list[int]) -> None:
        """Keep the draft cache's entries of the accepted path (those it fed: a prefix of it)."""
        start, fed = self._fed
        self.cache.keep(start, [fed[j] for j in path if fed[j] >= 0])
