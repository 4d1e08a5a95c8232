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

How close is close enough: :func:`tv_noise_bound`, the one total-variation bound of the project (the
notebooks, the lossless tests and the app's sample view read it).

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
        return tv_distance(self.correct, self.p)

    @property
    def tv_bug(self) -> float:
        return tv_distance(self.bug, self.p)

    @property
    def noise_bound(self) -> float:
        """What sampling noise alone may put between a correct rule's histogram and p."""
        return tv_noise_bound(torch.tensor(self.p), self.trials)


def overlap(p: torch.Tensor, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, float]:
    """(C,) p and q -> what the rule does with each part of them: (min(p, q), the mass a draft from q
    keeps; max(0, p − q), the residual before it is normalised; max(0, q − p), the excess the rule
    rejects; β = Σ min(p, q)). min + residual = p, and the residual's mass is 1 − β."""
    shared = torch.minimum(p, q)                                                   # (C,)
    return shared, (p - q).clamp_min(0), (q - p).clamp_min(0), float(shared.sum())


def tv_distance(a, b) -> float:
    """Total variation distance: half the summed absolute differences of two (C,) distributions."""
    return 0.5 * float((torch.as_tensor(a, dtype=torch.float64) - torch.as_tensor(b, dtype=torch.float64)).abs().sum())


def tv_noise_bound(p: torch.Tensor, n: int) -> float:
    """The total variation a histogram of ``n`` draws from (C,) ``p`` may stray from p by noise alone:
    1.5 · Σ_v sqrt(p(v)(1 − p(v)) / n). Each share's error has standard deviation sqrt(p(1 − p)/n) and a
    mean absolute value of about 0.8 of it, so the expected TV is about 0.4 · Σ sqrt(p(1 − p)/n): the bound
    is about four times the expected noise, and 0 where p is one-hot (the histogram must then equal p)."""
    return 1.5 * float((p * (1 - p) / n).sqrt().sum())


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
