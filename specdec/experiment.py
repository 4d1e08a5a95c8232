"""Losslessness, seen: the pure rule run many times on one position's p and q, no model involved.

Each trial drafts x from q, keeps it with probability min(1, p(x)/q(x)) and otherwise draws from
the residual norm(max(0, p - q)), through :func:`specdec.rule.verify` batched over the trials.
The emitted tokens are then distributed as p (Leviathan et al. 2023, Appendix A.1). Beside it,
the field's most repeated bug (transformers #32867): a draft *chosen by argmax* but scored with
its softmax q, which lands off p.

A trace keeps, per position, only the top of p and of q (and the drafted token); the rest of the
vocabulary is lumped into one "other" outcome with the remaining mass of each. The rule is
lossless for any pair of distributions, so it is exactly lossless for the lumped pair too, and
the histogram is compared with the lumped p.

Shapes: N trials, C outcomes (the candidates and "other").
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .rule import verify
from .sampling import draw
from .trace import DraftPosition

OTHER = "(all other tokens)"


@dataclass(frozen=True)
class Histogram:
    labels: tuple[str, ...]   # (C,) the candidate tokens' texts, then OTHER
    p: tuple[float, ...]      # (C,) the verifier's distribution, lumped
    q: tuple[float, ...]      # (C,) the draft's
    correct: tuple[float, ...]  # (C,) share of trials emitting each outcome, rule as written
    bug: tuple[float, ...]      # (C,) the same with the draft's argmax scored with softmax q
    trials: int

    @property
    def tv_correct(self) -> float:
        """Total variation distance from p: half the summed absolute differences."""
        return 0.5 * sum(abs(a - b) for a, b in zip(self.correct, self.p))

    @property
    def tv_bug(self) -> float:
        return 0.5 * sum(abs(a - b) for a, b in zip(self.bug, self.p))


def lumped(pos: DraftPosition) -> tuple[tuple[str, ...], torch.Tensor, torch.Tensor]:
    """The position's candidates and one "other" outcome: labels, p (C,) and q (C,)."""
    p = torch.tensor([c.p for c in pos.candidates] + [0.0], dtype=torch.float64)
    q = torch.tensor([c.q for c in pos.candidates] + [0.0], dtype=torch.float64)
    p[-1], q[-1] = (1 - p[:-1].sum()).clamp_min(0), (1 - q[:-1].sum()).clamp_min(0)
    return tuple(c.text for c in pos.candidates) + (OTHER,), (p / p.sum()).float(), (q / q.sum()).float()


def emitted(p: torch.Tensor, q: torch.Tensor, n: int, generator: torch.Generator, argmax_draft: bool = False
            ) -> torch.Tensor:
    """(C,) p and q -> (C,) share of ``n`` one-draft rounds whose first emitted token is each
    outcome. ``argmax_draft`` plants the bug: the draft takes q's argmax but reports q."""
    C = p.shape[0]
    drafts = (q.argmax().expand(n) if argmax_draft else draw(q.expand(n, C), generator)).view(n, 1)  # (N, 1)
    v = verify(drafts, q.expand(n, 1, C), p.expand(n, 2, C), generator)
    first = torch.where(v.n_accepted == 1, drafts[:, 0], v.next_token)                              # (N,)
    return torch.bincount(first, minlength=C).float() / n


def argmax_bug(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """(C,) p and q -> (C,) exactly what the bug emits: q's argmax x*, kept with probability
    min(1, p(x*)/q(x*)), else a draw from the residual norm(max(0, p - q))."""
    x = int(q.argmax())
    keep = min(1.0, float(p[x] / q[x]))
    out = torch.zeros_like(p)
    if keep < 1:  # then p(x*) < q(x*), so p exceeds q somewhere and the residual has mass
        residual = (p - q).clamp_min(0)
        out = (1 - keep) * residual / residual.sum()
    out[x] += keep
    return out


def bug_tv(pos: DraftPosition) -> float:
    """The bug's exact total variation from p at a position (its lumped p and q): 0 where q is one-hot
    (its argmax is then a sample of q) or where p is one-hot on q's argmax."""
    _, p, q = lumped(pos)
    return 0.5 * float((argmax_bug(p, q) - p).abs().sum())


def histogram(pos: DraftPosition, n: int = 10_000, seed: int = 0) -> Histogram:
    labels, p, q = lumped(pos)
    generator = torch.Generator().manual_seed(seed)
    correct, bug = emitted(p, q, n, generator), emitted(p, q, n, generator, argmax_draft=True)
    as_tuple = lambda t: tuple(float(x) for x in t)  # noqa: E731
    return Histogram(labels, as_tuple(p), as_tuple(q), as_tuple(correct), as_tuple(bug), n)
