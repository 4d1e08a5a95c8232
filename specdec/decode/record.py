"""One round's :class:`~specdec.trace.RoundTrace`, built from the round's typed values.

The engine hands over what the round drafted (a :class:`~specdec.decode.proposal.Proposal`), the
verifier's p at every node, the rule's :class:`~specdec.decode.rule.TreeVerdict` and what it committed
(an :class:`Outcome`); everything the trace shows of p, q, the draws and the residuals comes to
the host in ONE read here (tests/model/test_device_path.py counts them).

A chain round's ``positions`` are its drafted tokens. A tree round's are its chain view (the
accepted path, then the first rejected child of the node the walk stopped at), so that the
summaries and the colour-coded output read it as a chain; ``tree`` then holds every node.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from specdec.decode.proposal import Proposal, depths
from specdec.decode.rule import TreeVerdict
from specdec.decode.sampling import host_read, to_device
from specdec.trace import (
    ACCEPTED,
    AFTER_STOP,
    BONUS,
    PLAIN,
    REJECTED,
    RESAMPLED,
    ROOT,
    TESTED,
    UNREACHED,
    UNTESTED,
    Candidate,
    DraftPosition,
    DraftStop,
    PhaseTimes,
    RoundTrace,
    TokenProb,
    TreeNode,
    TreeRound,
)

TOP_N = 8  # entries of p, q and the residual kept per position: enough for a bar chart


@dataclass(frozen=True)
class Outcome:
    """What a round decided and committed, read on the host."""

    path: tuple[int, ...]      # the accepted nodes, in depth order
    next_token: int            # drawn after the path: from the residual after a rejection, or from p
    emitted: tuple[int, ...]   # the path's tokens and next_token, cut after the first stop token
    pieces: tuple[str, ...]    # the output text of each emitted id


def round_trace(*, index: int, context_len: int, proposal: Proposal, target_probs: torch.Tensor,
                verdict: TreeVerdict, outcome: Outcome, target_cache: tuple[int, int],
                draft_cache: tuple[int, int] | None, draft_stop: DraftStop, times: PhaseTimes, elapsed: float,
                token_text: Callable[[int], str], greedy: bool = False) -> RoundTrace:
    """A stop token among the kept drafts ends the round there: only the drafts up to it count as
    accepted, and no next token follows. ``greedy``: temperature 0, where no draw u decides anything
    (a draft is kept iff it is the verifier's argmax), so none is recorded."""
    p, q, N, nxt = target_probs, proposal.probs, proposal.n, outcome.next_token  # (N+1, V) each
    n, tree, path = min(TOP_N, p.shape[-1]), proposal.from_tree_drafter, list(outcome.path)
    emitted_drafts = min(len(path), len(outcome.emitted))
    stopped_in_drafts = len(outcome.emitted) <= len(path)
    last = path[-1] if path else 0
    first_rejected = next((j for j in range(1, N + 1) if proposal.parents[j] == last), None)
    if not tree:  # a chain: every node, whose parents are the rows before them (a view, no copy)
        shown, rows = list(range(1, N + 1)), slice(0, N)
    else:
        shown = path + ([first_rejected] if first_rejected is not None and not stopped_in_drafts else [])
        rows = to_device([proposal.parents[j] for j in shown], p.device)         # (S,) shown nodes' parents

    # ONE host read: the shown positions' numbers (_position_numbers), the draws and ratios, the top of the
    # distribution the next token was drawn from and, for a tree, every node's q(x) and p(x) at its parent
    # and the verdict's per-node numbers and residual tops
    shown_tokens = to_device([proposal.tokens[j] for j in shown], p.device)      # (S,)
    # a node chosen from the context alone (the suffix tree) was drawn from nothing: its q is one-hot at itself
    q_shown = (torch.nn.functional.one_hot(shown_tokens, q.shape[-1]).to(q.dtype) if proposal.one_hot_nodes
               else q[rows])                                                      # (S, V)
    packed = _position_numbers(p[rows], q_shown, shown_tokens, n)
    next_dist = verdict.next_dist[0]                                              # (V,)
    parts = [packed, verdict.ratios[0], verdict.uniforms[0], *next_dist.topk(n), next_dist[nxt]]
    if tree:
        parent, token = to_device(proposal.parents[1:], p.device), to_device(proposal.tokens[1:], p.device)  # (N,)
        parts += [torch.ones(len(token), device=p.device) if proposal.one_hot_nodes else q[parent, token],
                  p[parent, token], verdict.tested[0], verdict.accepted[0],
                  *verdict.residuals[0, 1:].topk(n, dim=-1)]
    take = _reader(host_read(*parts))
    numbers = [take(packed.shape[-1]) for _ in shown]
    ratios, uniforms = take(N + 1), take(N + 1)
    if greedy:
        uniforms = [float("nan")] * len(uniforms)
    nxt_top, nxt_prob = (take(n), take(n)), take(1)[0]

    positions = []
    for i, (j, row) in enumerate(zip(shown, numbers)):
        status = (ACCEPTED if i < emitted_drafts else AFTER_STOP if stopped_in_drafts
                  else REJECTED if i == len(path) else UNREACHED)
        tested = status in TESTED  # the rule read u and p/q here; elsewhere they decide nothing
        token = proposal.tokens[j]
        positions.append(DraftPosition(
            token_id=token, text=token_text(token), q=row[1], p=row[0], ratio=_number(ratios[j]) if tested else None,
            u=_number(uniforms[j]) if tested else None, beta=row[2], status=status,
            candidates=_candidates(row, token, n, token_text),
            confidence=proposal.confidence[j - 1] if j - 1 < len(proposal.confidence) else None))
    if stopped_in_drafts:
        kind, token, top = None, None, ()
    else:
        kind = PLAIN if N == 0 else RESAMPLED if first_rejected is not None else BONUS
        token, top = TokenProb(nxt, token_text(nxt), nxt_prob), _top(*nxt_top, token_text)
    return RoundTrace(
        index=index, context_len=context_len, positions=tuple(positions), n_accepted=emitted_drafts,
        rejected_at=len(path) if kind == RESAMPLED else None, next_kind=kind, next_token=token, next_top=top,
        emitted=outcome.emitted, pieces=outcome.pieces, target_cache=target_cache, draft_cache=draft_cache,
        times=times, elapsed=elapsed, draft_stop=draft_stop, drafted_by=proposal.source, match=proposal.match,
        tree=_tree_round(proposal, path, ratios, uniforms, take, n, token_text) if tree else None)


def _tree_round(proposal: Proposal, path: list[int], ratios: list[float], uniforms: list[float], take, n: int,
                token_text) -> TreeRound:
    """Every node of a tree round, from the rest of the round's host read (``take``)."""
    N, depth = proposal.n, depths(proposal.parents)
    q_x, p_x, tested, accepted = take(N), take(N), take(N + 1), take(N + 1)
    res_vals, res_ids = take(N * n), take(N * n)
    root = proposal.tokens[0]
    nodes = [TreeNode(-1, root, token_text(root), 0, 1.0, 1.0, 1.0, ROOT, None, None)]
    for j in range(1, N + 1):
        status = ACCEPTED if accepted[j] else REJECTED if tested[j] else UNTESTED
        top = slice((j - 1) * n, j * n)  # node j's block of the residual tops
        residual_top = _top(res_vals[top], res_ids[top], token_text) if status == REJECTED else ()
        token = proposal.tokens[j]
        nodes.append(TreeNode(proposal.parents[j], token, token_text(token), depth[j], q_x[j - 1], proposal.path_q[j],
                              p_x[j - 1], status, _number(ratios[j]), _number(uniforms[j]), residual_top))
    return TreeRound(tuple(nodes), proposal.width, proposal.budget, tuple(path), proposal.one_hot_nodes)


def _number(x: float) -> float | None:
    return None if x != x else x  # NaN (untested, or no draw at T = 0) -> None


def _reader(numbers: list[float]):
    """``take(m)``: the next m numbers of a host read, in the order they were packed."""
    it = iter(numbers)
    return lambda m: [next(it) for _ in range(m)]


def _candidates(numbers: list[float], drafted: int, n: int, token_text) -> tuple[Candidate, ...]:
    """The top of p and the top of q (with mass) and the drafted token, each with both
    probabilities, largest first: one shared token axis for the chart of this position.
    ``numbers``: the position's row of :func:`_position_numbers`, read on the host."""
    p_x, q_x, _, p_vals, p_ids, q_at_p, q_vals, q_ids, p_at_q = *numbers[:3], *(
        numbers[3 + j * n:3 + (j + 1) * n] for j in range(6))
    p_ids, q_ids = [int(i) for i in p_ids], [int(i) for i in q_ids]
    p = {drafted: p_x, **dict(zip(q_ids, p_at_q)), **dict(zip(p_ids, p_vals))}
    q = {drafted: q_x, **dict(zip(p_ids, q_at_p)), **dict(zip(q_ids, q_vals))}
    ids = {drafted}
    for vals, top in ((p_vals, p_ids), (q_vals, q_ids)):
        ids |= {i for x, i in zip(vals, top) if x > 0}
    ranked = sorted(ids, key=lambda i: -max(p[i], q[i]))
    return tuple(Candidate(i, token_text(i), p[i], q[i]) for i in ranked)


def _top(vals: list[float], ids: list[float], token_text) -> tuple[TokenProb, ...]:
    """A distribution's top entries with mass, from its topk values and ids read on the host."""
    return tuple(TokenProb(int(i), token_text(int(i)), x) for x, i in zip(vals, ids) if x > 0)


def _position_numbers(p: torch.Tensor, q: torch.Tensor, tokens: torch.Tensor, n: int) -> torch.Tensor:
    """(R, V) p and q at R drafted positions, (R,) the drafted tokens -> (R, 3 + 6n) on the device, for
    the trace's one host read: p(x), q(x), beta = sum min(p, q), then p's top n (values, ids, q there)
    and q's top n (values, ids, p there). Ids are exact in float32 below 2^24."""
    x = tokens[:, None]                                                           # (R, 1)
    both = torch.minimum(p, q)                                                    # (R, V)
    # one sum per row, as one position at a time summed it: a batched sum rounds differently on a large V
    beta = torch.stack([row.sum() for row in both]) if len(both) else both.new_zeros(0)  # (R,)
    p_vals, p_ids = p.topk(n, dim=-1)                                             # (R, n) each
    q_vals, q_ids = q.topk(n, dim=-1)                                             # (R, n) each
    return torch.cat([p.gather(-1, x), q.gather(-1, x), beta[:, None], p_vals, p_ids.float(), q.gather(-1, p_ids),
                      q_vals, q_ids.float(), p.gather(-1, q_ids)], -1)           # (R, 3 + 6n)
