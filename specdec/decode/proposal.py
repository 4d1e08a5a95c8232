"""What every drafter proposes: a token tree after the last context token.

Node 0 is the root (the last context token, already committed); node j > 0 a drafted token whose
parent ``parents[j] < j`` comes before it, and a node's children are its children in index order
(the order they were drawn in). A chain is the tree whose node j has parent j - 1: the K tokens
of prompt lookup or of the draft model drafting one token after another. The verifier then sees
the chain with its plain causal mask, and the rule (:func:`specdec.decode.rule.verify_tree`) reads it as
Leviathan et al.'s Algorithm 1 (:func:`specdec.decode.rule.verify`). The structure (children, depths,
ancestors, the attention mask) is in :mod:`specdec.decode.tree`.

Shapes: N drafted nodes, V vocabulary entries.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from specdec.trace import DraftedBy, DraftStop


@dataclass(frozen=True)
class Proposal:
    parents: tuple[int, ...]   # (N+1,) parents[0] == -1; a chain's: -1, 0, 1, ..., N-1
    tokens: tuple[int, ...]    # (N+1,) tokens[0] is the root's token, the last context token
    probs: torch.Tensor        # (N+1, V) row j: the q node j's children were drawn from (zeros for a leaf)
    forward_s: float = 0.0     # wall time inside draft model forwards
    stopped: DraftStop = DraftStop.LIMIT  # why drafting ended: LIMIT when it reached the depth asked for
    confidence: tuple[float, ...] = ()  # per drafted token of a chain: what the confidence test read
    source: DraftedBy = DraftedBy.NOT_HYBRID  # LOOKUP or MODEL for a hybrid drafter's proposal
    path_q: tuple[float, ...] = ()  # (N+1,) a tree's path probabilities, by which its nodes were ranked
    width: int = 1             # W, the most children the drafter gives a node: 1 for a chain drafter
    budget: int = 0            # a tree drafter's node budget N
    one_hot_nodes: bool = False  # each node chosen from the context alone (q_i one-hot at its token): the suffix tree
    match: int = 0             # a copying drafter's match: how many of the context's last tokens it found earlier

    @classmethod
    def chain(cls, root: int, drafted: list[int], probs: torch.Tensor, forward_s: float = 0.0,
              stopped: DraftStop = DraftStop.LIMIT, confidence: tuple[float, ...] = (),
              source: DraftedBy = DraftedBy.NOT_HYBRID) -> Proposal:
        """K tokens drafted one after another after ``root``. ``probs`` (K+1, V): row i the q token i was
        drawn from, row K zeros (the last token is a leaf), built so by the drafter: no copy per round."""
        if probs.shape[0] != len(drafted) + 1:
            raise ValueError(f"q of a chain of {len(drafted)} tokens must have {len(drafted) + 1} rows, "
                             f"got {probs.shape[0]}")
        return cls(tuple(range(-1, len(drafted))), (root, *drafted), probs, forward_s, stopped, confidence, source)

    @property
    def n(self) -> int:
        return len(self.parents) - 1

    @property
    def drafted(self) -> list[int]:
        """The drafted tokens in node order (a chain's: in the order they follow the context)."""
        return list(self.tokens[1:])

    @property
    def is_chain(self) -> bool:
        """Every node has at most one child: the verifier reads it with its plain causal mask, and the
        rule with Algorithm 1. A tree drafter's proposal may be one too (where the draft is sure)."""
        return is_chain(self.parents)

    @property
    def from_tree_drafter(self) -> bool:
        """Drafted by a tree drafter (W > 1): its round records every node and the residual of each
        rejection, whatever shape this round's tree took (:func:`is_chain` asks for the shape)."""
        return self.width > 1


def one_hot(ids: torch.Tensor, vocab: int) -> torch.Tensor:
    """(K,) ids -> (K+1, V): row i one-hot at ids[i], row K zeros. The q of a chain drafted deterministically."""
    probs = torch.zeros(len(ids) + 1, vocab, device=ids.device)                  # (K+1, V)
    probs[:-1].scatter_(1, ids[:, None], 1.0)
    return probs


# ---- a proposal's tree, as its parents list: node 0 the root, parents[j] < j

def is_chain(parents) -> bool:
    """Node j's parent is node j - 1: each node has at most one child (with parents[j] < j, the same)."""
    return all(a == j - 1 for j, a in enumerate(parents))


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
    """Each node's children in index order (the order the drafter drew them in). ValueError unless
    node 0 is the root and every other node's parent comes before it."""
    if len(parents) == 0 or parents[0] != -1:
        raise ValueError(f"parents[0] must be -1 (node 0 is the root), got {list(parents[:1])}")
    kids: list[list[int]] = [[] for _ in parents]
    for j in range(1, len(parents)):
        if not 0 <= parents[j] < j:
            raise ValueError(f"parents[{j}] = {parents[j]}: a node's parent must come before it, 0 <= parents[i] < i")
        kids[parents[j]].append(j)
    return kids
