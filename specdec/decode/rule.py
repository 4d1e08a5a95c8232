"""The speculative sampling rule (Leviathan et al. 2023, Algorithm 1; Chen et al. 2023, Alg. 2).

Letters as in Leviathan et al.: **p is the verifier (target)**, **q is the draft**. (Chen et al.
and gpt-fast swap them.) A drafted token x at position i is kept with probability
min(1, p_i(x) / q_i(x)); the first rejected one is replaced by a sample from
norm(max(0, p_i - q_i)); when all K are kept a bonus token is sampled from p_{K+1}. The emitted
tokens are then distributed exactly as p.

This module is pure: no model, no cache, no tokenizer. It is batched over B independent trials so
that the losslessness test can run 10^5 rounds in one call; the engine calls it with B = 1.

A tree of drafted tokens is verified by recursive rejection sampling without replacement
(``verify_tree``; Jeon et al. 2024, "Recursive Speculative Decoding", arXiv:2402.14160):
the siblings below a node are tested in the order they were drawn, each against what is left of p
after the earlier ones were rejected. The chain is the tree of width 1: there the walk is ``verify``'s
rule, and ``verify_tree`` hands a chain to ``verify`` itself, which draws as Algorithm 1 does.

Shapes: B trials, K drafted tokens, V vocabulary entries; in a tree N+1 nodes (node 0 the root),
D its depth and W the most children of one node.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from specdec.decode.proposal import children, depths, is_chain
from specdec.decode.sampling import draw


class DrafterContractError(ValueError):
    """The drafter broke its contract: a drafted token must have q(x) > 0 under the q it returned."""


@dataclass(frozen=True)
class Verdict:
    ratios: torch.Tensor      # (B, K)  p(x) / q(x) at each drafted token
    uniforms: torch.Tensor    # (B, K)  the draws u in (0, 1]; token i is kept iff u_i <= ratio_i
    n_accepted: torch.Tensor  # (B,)    length of the leading run of kept tokens, 0..K
    next_dist: torch.Tensor   # (B, V)  residual norm(max(0, p - q)) at the rejection, or p for the bonus
    next_token: torch.Tensor  # (B,)    sampled from next_dist (argmax when greedy)
    contract: torch.Tensor    # ()      bool: q(x) > 0 at every drafted token (the drafter kept its contract)


def verify(draft_tokens: torch.Tensor, draft_probs: torch.Tensor, target_probs: torch.Tensor,
           generator: torch.Generator, greedy: bool = False, check: bool = True) -> Verdict:
    """Every tensor on the inputs' device, the draws from ``generator`` there. ``check=False`` leaves
    the drafter's contract to the caller: it reads ``contract`` with its other numbers (one host read
    per verification) and calls :func:`check_contract` when it is False."""
    B, K = draft_tokens.shape
    V = target_probs.shape[-1]
    # Explicit checks, not asserts: they must hold under ``python -O`` too.
    if tuple(draft_probs.shape) != (B, K, V):
        raise ValueError(f"q must be (B, K, V) = {(B, K, V)}, got {tuple(draft_probs.shape)}")
    if tuple(target_probs.shape) != (B, K + 1, V):
        raise ValueError(f"p must be (B, K+1, V) = {(B, K + 1, V)}, got {tuple(target_probs.shape)}")

    idx = draft_tokens.unsqueeze(-1)                                  # (B, K, 1)
    q_x = draft_probs.gather(-1, idx).squeeze(-1)                     # (B, K)
    p_x = target_probs[:, :K].gather(-1, idx).squeeze(-1)             # (B, K)
    contract = (q_x > 0).all()                                        # ()
    if check and not bool(contract):
        check_contract(draft_tokens, draft_probs)
    ratios = p_x / q_x                                                # (B, K)

    # u in (0, 1] rather than [0, 1): then u <= ratio accepts with probability exactly min(1, ratio),
    # including ratio == 0 (never) and ratio == 1 (always), which makes temperature 0 exact.
    uniforms = 1.0 - torch.rand((B, K), generator=generator, device=ratios.device)  # (B, K)
    kept = (uniforms <= ratios).long()                                # (B, K)
    n_accepted = kept.cumprod(-1).sum(-1)                             # (B,)

    # Padding q with a zero row at position K turns "bonus from p" into the same residual formula.
    q_pad = torch.cat([draft_probs, draft_probs.new_zeros(B, 1, V)], dim=1)  # (B, K+1, V)
    rows = torch.arange(B, device=target_probs.device)
    p_next = target_probs[rows, n_accepted]                           # (B, V)
    next_dist = _residual(p_next, q_pad[rows, n_accepted])            # (B, V)
    if greedy:
        next_token = next_dist.argmax(-1)
    else:
        next_token = draw(next_dist, generator)
    return Verdict(ratios, uniforms, n_accepted, next_dist, next_token, contract)


def check_contract(draft_tokens: torch.Tensor, draft_probs: torch.Tensor) -> None:
    """(B, K) tokens, (B, K, V) q: DrafterContractError unless q(x) > 0 at every drafted token. It is
    the drafter's contract (it returns exactly the distribution it sampled from); broken, p(x) / 0 = inf
    would accept the token always and the output would no longer be p."""
    q_x = draft_probs.gather(-1, draft_tokens.unsqueeze(-1)).squeeze(-1)  # (B, K)
    if not bool((q_x > 0).all()):
        b, i = (q_x <= 0).nonzero()[0].tolist()
        raise DrafterContractError(f"drafted token {int(draft_tokens[b, i])} at position {i} has q(x) = "
                                   f"{float(q_x[b, i])}: the drafter did not sample from the q it returned")


@dataclass(frozen=True)
class TreeVerdict:
    tested: torch.Tensor      # (B, N+1) bool  the rule decided on this node (compared it, at T = 0)
    accepted: torch.Tensor    # (B, N+1) bool  on the accepted path (the root excluded)
    ratios: torch.Tensor      # (B, N+1) r(x) / q_i(x) at the test (T = 0: p(x), 0 or 1); NaN where untested
    uniforms: torch.Tensor    # (B, N+1) the draw u in (0, 1] at the test; NaN where untested, or greedy in a tree
    path: torch.Tensor        # (B, D)   node indices of the accepted path in depth order, -1 padded
    n_accepted: torch.Tensor  # (B,)     length of the accepted path, 0..D
    last: torch.Tensor        # (B,)     the node the walk stopped at (0 = the root)
    next_dist: torch.Tensor   # (B, V)   last residual after every child of `last` was rejected, or p at `last`
    next_token: torch.Tensor  # (B,)     sampled from next_dist (argmax when greedy)
    residuals: torch.Tensor | None  # (B, N+1, V) the residual right after node j was rejected, zeros elsewhere
    contract: torch.Tensor    # ()       bool: q_i(x) > 0 at every node (the drafter kept its contract)


def _without(q: torch.Tensor, removed: torch.Tensor) -> torch.Tensor:
    """(L, V) q with the tokens of the earlier siblings removed and renormalised: the law of the next
    draw without replacement. Not renormalising inflates the ratio r(x) / q_i(x) of every later sibling."""
    kept = q.masked_fill(removed, 0.0)                                # (L, V)
    # A first child sees q exactly as the drafter returned it: dividing a row that sums to 1 only up to
    # rounding would move its mass by an ulp, and a chain would no longer be ``verify`` bit for bit.
    return torch.where(removed.any(-1, keepdim=True), kept / kept.sum(-1, keepdim=True).clamp_min(1e-30), q)


def _residual(r: torch.Tensor, q_i: torch.Tensor) -> torch.Tensor:
    """(L, V) norm(max(0, r - q_i)): what the next sibling (or the final token) must be drawn from after
    q_i's sample was rejected under target r. Keeping r instead re-counts the mass already offered."""
    residual = (r - q_i).clamp_min(0)                                 # (L, V)
    mass = residual.sum(-1, keepdim=True)                             # (L, 1)
    # A rejection implies r(x) < q_i(x), hence mass > 0 mathematically; only rounding can zero it, when
    # r == q_i up to rounding. The residual before it is then the nearest distribution at hand (in
    # ``verify``, p): it never gives 0 / 0 = NaN, and the event is as rare as the rounding.
    return torch.where(mass > 0, residual / mass.clamp_min(1e-30), r)


def _contract(kids: list[list[int]], tokens: torch.Tensor, draft_probs: torch.Tensor) -> torch.Tensor:
    """(B, N+1) bool on the device: node i broke the drafter's contract. q_i(x_i) > 0 iff q(x_i) > 0 under
    the parent's row and x_i is no earlier sibling's token (sampling without replacement never repeats one).
    Checked for every node, tested or not, so that a broken drafter is refused whatever the draws; broken,
    r(x) / 0 = inf would accept the token always."""
    bad = torch.zeros_like(tokens, dtype=torch.bool)                  # (B, N+1)
    for j, siblings in enumerate(kids):
        seen = torch.zeros(tokens.shape[0], draft_probs.shape[-1], dtype=torch.bool, device=tokens.device)  # (B, V)
        for i in siblings:
            x = tokens[:, i:i + 1]                                    # (B, 1)
            q_x = draft_probs[:, j].gather(-1, x).squeeze(-1)         # (B,)
            bad[:, i] = (q_x <= 0) | seen.gather(-1, x).squeeze(-1)
            seen.scatter_(-1, x, True)
    return bad


def check_tree_contract(parents: list[int] | tuple[int, ...], tokens: torch.Tensor, draft_probs: torch.Tensor) -> None:
    """(B, N+1) tokens, (B, N+1, V) q: DrafterContractError unless q_i(x) > 0 at every node (a chain:
    :func:`check_contract`)."""
    kids = children(parents)
    if is_chain(parents):
        return check_contract(tokens[:, 1:], draft_probs[:, :-1])
    bad = _contract(kids, tokens, draft_probs)
    if not bool(bad.any()):  # one host read for the whole tree
        return
    j, i = next((j, i) for j, siblings in enumerate(kids) for i in siblings if bool(bad[:, i].any()))
    b = int(bad[:, i].nonzero()[0])
    raise DrafterContractError(
        f"node {i} drafted token {int(tokens[b, i])} (trial {b}) with q_i(x) = 0 under node {j}'s q with its "
        "earlier siblings removed: a duplicate sibling, or not sampled from the q the drafter returned")


def _chain_verdict(v: Verdict, B: int, N: int, V: int, greedy: bool, keep_residuals: bool) -> TreeVerdict:
    """``verify``'s verdict on a chain of N nodes, told as a tree's: node i is drafted token i - 1."""
    dev = v.n_accepted.device
    node = torch.arange(1, N + 1, device=dev)                         # (N,)
    n = v.n_accepted[:, None]                                         # (B, 1)
    tested = torch.cat([torch.zeros(B, 1, dtype=torch.bool, device=dev), node <= n + 1], 1)   # (B, N+1)
    accepted = torch.cat([torch.zeros(B, 1, dtype=torch.bool, device=dev), node <= n], 1)     # (B, N+1)
    nan = torch.full((B, 1), float("nan"), device=dev)
    ratios = torch.cat([nan.to(v.ratios.dtype), v.ratios], 1).masked_fill(~tested, float("nan"))  # (B, N+1)
    uniforms = torch.cat([nan, v.uniforms], 1).masked_fill(~tested, float("nan"))              # (B, N+1)
    path = torch.where(node <= n, node, -1)                           # (B, N)
    residuals = None
    if keep_residuals:
        residuals = v.next_dist.new_zeros(B, N + 1, V)                # (B, N+1, V)
        out = (v.n_accepted < N).nonzero().squeeze(-1)                # trials that rejected a node
        if not greedy and len(out):
            residuals[out, v.n_accepted[out] + 1] = v.next_dist[out]
    return TreeVerdict(tested, accepted, ratios, uniforms, path, v.n_accepted, v.n_accepted, v.next_dist,
                       v.next_token, residuals, v.contract)


def verify_tree(parents: list[int] | tuple[int, ...], tokens: torch.Tensor, draft_probs: torch.Tensor,
                target_probs: torch.Tensor, generator: torch.Generator, greedy: bool = False,
                keep_residuals: bool = False, check: bool = True, one_hot_nodes: bool = False) -> TreeVerdict:
    """Walk a token tree from the root with recursive rejection sampling without replacement (Jeon et al.
    2024): at node ``cur`` with residual r (first p[cur]), child i with token x_i is kept iff
    u <= r(x_i) / q_i(x_i), q_i = q[cur] with the earlier siblings' tokens removed and renormalised; on a
    rejection r <- norm(max(0, r - q_i)) and the next child is tested; a kept child becomes ``cur`` with
    r = p[child]. When every child is rejected the final token is drawn from r; at a leaf it is the bonus
    from p[leaf]. SpecInfer (Miao et al. 2023) is the variant with replacement: siblings drawn i.i.d.
    and every q_i = q[cur]; with siblings drawn without replacement, that q_i would no longer be their law.

    ``parents[i]`` is node i's parent (``parents[0] == -1``, ``parents[i] < i``); tokens (B, N+1), column 0
    unused; draft_probs (B, N+1, V), row j the q node j's children were drawn from without replacement;
    target_probs (B, N+1, V), row j the verifier's p after node j's path. ``keep_residuals`` returns the
    (B, N+1, V) residual left after each rejection, for the renderers (zeros at T = 0, where none is formed).

    Greedy (T = 0) is SpecInfer's VerifyGreedy: step to the child whose token is argmax p[cur], else emit
    argmax p[cur]. It consumes no randomness and ignores q: at T = 0 the tree's q only served the drafter to
    rank its candidates, and the output is the verifier's greedy sequence whatever q says.

    A chain (each node at most one child) is :func:`verify`'s special case, and is verified by it: its
    draws are Algorithm 1's (every u up front, also at T = 0, where they decide nothing) and the vectorised
    rule costs no walk. ``check=False`` leaves the drafter's contract to the caller, as in ``verify``: it reads
    ``contract`` with its other numbers and calls :func:`check_tree_contract` when it is False.

    ``one_hot_nodes``: every node is its drafter's choice from the context alone (prompt lookup, the suffix
    tree: nothing was drawn), so node i's q_i is one-hot at its own token whatever its siblings are, and
    ``draft_probs`` is not read. Child i is then kept with probability r(x_i) and a rejection leaves
    r <- norm(r with x_i removed): each test one step of Algorithm 1 with a deterministic draft, so the
    walk is lossless as a sampled tree's is, and no q can break a contract. A chain of such nodes is
    ``verify`` with one-hot rows (made here from the tokens), as prompt lookup's always was.
    """
    if tokens.dim() != 2 or tokens.shape[1] != len(parents):
        raise ValueError(f"tokens must be (B, N+1) with N+1 = len(parents) = {len(parents)}, "
                         f"got {tuple(tokens.shape)}")
    B, N1 = tokens.shape
    V = target_probs.shape[-1]
    if tuple(target_probs.shape) != (B, N1, V):
        raise ValueError(f"p must be (B, N+1, V) = {(B, N1, V)}, got {tuple(target_probs.shape)}")
    if tuple(draft_probs.shape) != (B, N1, V):
        raise ValueError(f"q must be (B, N+1, V) = {(B, N1, V)}, got {tuple(draft_probs.shape)}")
    kids_of = children(parents)
    if is_chain(parents):
        if one_hot_nodes:  # row j one-hot at node j + 1's token: whatever rows the drafter gave
            draft_probs = torch.zeros_like(target_probs)
            draft_probs[:, :-1].scatter_(-1, tokens[:, 1:, None], 1.0)
        v = verify(tokens[:, 1:], draft_probs[:, :-1], target_probs, generator, greedy=greedy, check=check)
        return _chain_verdict(v, B, N1 - 1, V, greedy, keep_residuals)
    D = max(depths(parents))
    contract = torch.ones((), dtype=torch.bool, device=tokens.device)  # T = 0 ignores q, one-hot nodes keep it
    if not greedy and not one_hot_nodes and check:
        check_tree_contract(parents, tokens, draft_probs)
    elif not greedy and not one_hot_nodes:
        contract = ~_contract(kids_of, tokens, draft_probs).any()

    p, q, dev = target_probs, draft_probs, target_probs.device
    W = max(len(k) for k in kids_of)
    slots = torch.tensor([k + [-1] * (W - len(k)) for k in kids_of], dtype=torch.long)
    slots = slots.reshape(N1, W).to(dev, non_blocking=True)           # (N+1, W) children, -1 padded
    rows = torch.arange(B, device=dev)
    cur = torch.zeros(B, dtype=torch.long, device=dev)                # (B,)
    walking = torch.ones(B, dtype=torch.bool, device=dev)             # (B,)
    r = p[:, 0].clone()                                               # (B, V)
    tested = torch.zeros(B, N1, dtype=torch.bool, device=dev)         # (B, N+1)
    accepted = torch.zeros(B, N1, dtype=torch.bool, device=dev)       # (B, N+1)
    ratios = torch.full((B, N1), float("nan"), dtype=p.dtype, device=dev)  # (B, N+1)
    uniforms = torch.full((B, N1), float("nan"), device=dev)          # (B, N+1)
    path = torch.full((B, D), -1, dtype=torch.long, device=dev)       # (B, D)
    residuals = p.new_zeros(B, N1, V) if keep_residuals else None     # (B, N+1, V)
    # One pass per depth, one (B,)-wide step per sibling slot: Python loops over D * W, never over trials.
    # Selecting the trials that test a slot (``nonzero``) is a device sync off the CPU, one per slot and
    # depth; it keeps exactly one draw per test, so a seed's stream on the CPU is what it always was.
    for d in range(D + 1):
        kids = slots[cur]                                             # (B, W)
        removed = torch.zeros(B, V, dtype=torch.bool, device=dev)     # (B, V) tokens of rejected siblings
        stepped = torch.zeros(B, dtype=torch.bool, device=dev)        # (B,)
        best = p[rows, cur].argmax(-1)                                # (B,) greedy's choice
        for w in range(W):
            b = (walking & ~stepped & (kids[:, w] >= 0)).nonzero().squeeze(-1)  # (L,) trials testing slot w
            if len(b) == 0:
                break  # children are left-aligned: no trial has a child in a later slot either
            c = kids[b, w]                                            # (L,) the node under test
            x = tokens[b, c]                                          # (L,)
            tested[b, c] = True
            if greedy:
                ratio = p[b, cur[b]].gather(-1, x[:, None]).squeeze(-1)  # (L,)
                take = x == best[b]
            else:
                if one_hot_nodes:                                     # q_i(x) = 1: the ratio is r(x)
                    q_i = torch.zeros(len(b), V, dtype=r.dtype, device=dev).scatter_(1, x[:, None], 1.0)  # (L, V)
                else:
                    q_i = _without(q[b, cur[b]], removed[b])          # (L, V)
                ratio = (r[b].gather(-1, x[:, None]) / q_i.gather(-1, x[:, None])).squeeze(-1)  # (L,)
                # u in (0, 1], as in ``verify``: u <= ratio accepts with probability exactly min(1, ratio).
                u = 1.0 - torch.rand(len(b), generator=generator, device=dev)  # (L,)
                uniforms[b, c] = u
                take = u <= ratio
                out, gone = b[~take], c[~take]
                r[out] = _residual(r[out], q_i[~take])
                removed[b, x] = True
                if residuals is not None:
                    residuals[out, gone] = r[out]
            ratios[b, c] = ratio
            kept, node = b[take], c[take]
            accepted[kept, node] = True
            path[kept, d] = node
            stepped[kept] = True
            cur[kept] = node
        walking &= stepped
        r[walking] = p[walking, cur[walking]]
        if not bool(walking.any()):
            break

    # At T = 0 the residual is never formed; p at the last node is what the argmax reads.
    next_dist = p[rows, cur] if greedy else r                         # (B, V)
    next_token = next_dist.argmax(-1) if greedy else draw(next_dist, generator)
    return TreeVerdict(tested, accepted, ratios, uniforms, path, accepted.sum(-1), cur, next_dist, next_token,
                       residuals, contract)
