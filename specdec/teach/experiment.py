"""Losslessness, seen: the pure rule run many times on one position's p and q, no model involved.

Each trial drafts x from q, keeps it with probability min(1, p(x)/q(x)) and otherwise draws from
the residual norm(max(0, p - q)), through :func:`specdec.decode.rule.verify` batched over the trials.
The emitted tokens are then distributed as p (Leviathan et al. 2023, Appendix A.1). Beside it, one of
three classic bugs (:data:`BUGS`), each a one-line change to a correct implementation that lands off p:

* ``argmax``: the field's most repeated bug (transformers #32867): a draft *chosen by argmax* but
  scored with its softmax q.
* ``unnormalised``: the replacement drawn from max(0, p − q) as if it summed to 1: an inverse-CDF draw
  (:func:`specdec.decode.sampling.draw`) whose uniform is not scaled by the residual's total 1 − β. A u past
  that total runs off the end of the cumulative sum and the clamp puts it on the last token the residual
  reaches: that token gains β · (1 − β), the others are short by a factor 1 − β.
* ``swapped``: the roles of p and q swapped in the verification (the draft still samples from q): the
  ratio q(x)/p(x) and the residual norm(max(0, q − p)), the mistake the two letter conventions invite
  (Chen et al. and gpt-fast call the draft p).

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

from specdec.decode.rule import verify
from specdec.decode.sampling import draw
from specdec.trace import DraftPosition

OTHER = "(all other tokens)"
BUGS = {"argmax": "argmax draft, scored with softmax q",
        "unnormalised": "residual not normalised",
        "swapped": "p and q swapped"}


@dataclass(frozen=True)
class Histogram:
    labels: tuple[str, ...]   # (C,) the candidate tokens' texts, then OTHER
    p: tuple[float, ...]      # (C,) the verifier's distribution, lumped
    q: tuple[float, ...]      # (C,) the draft's
    correct: tuple[float, ...]  # (C,) share of trials emitting each outcome, rule as written
    bug: tuple[float, ...]      # (C,) the same with the bug planted
    trials: int
    kind: str = "argmax"        # which bug, a key of BUGS

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


def emitted(p: torch.Tensor, q: torch.Tensor, n: int, generator: torch.Generator, bug: str | None = None
            ) -> torch.Tensor:
    """(C,) p and q -> (C,) share of ``n`` one-draft rounds whose first emitted token is each
    outcome, through :func:`specdec.decode.rule.verify`. ``bug`` (a key of :data:`BUGS`) plants that bug."""
    C = p.shape[0]
    drafts = (q.argmax().expand(n) if bug == "argmax" else draw(q.expand(n, C), generator)).view(n, 1)  # (N, 1)
    target, draft = (q, p) if bug == "swapped" else (p, q)
    # swapped, a token q drafts where p is 0 has the ratio q/0 = inf: always kept, as the buggy code would
    v = verify(drafts, draft.expand(n, 1, C), target.expand(n, 2, C), generator, check=bug != "swapped")
    replacement = v.next_token                                                                       # (N,)
    if bug == "unnormalised":
        cdf = (p - q).clamp_min(0).cumsum(-1).expand(n, C).contiguous()                              # (N, C)
        u = torch.rand(n, 1, generator=generator)                      # (N, 1) in [0, 1), not [0, 1 - beta)
        replacement = torch.searchsorted(cdf, u, right=True).squeeze(-1).clamp(max=_last_reached(p, q))
    first = torch.where(v.n_accepted == 1, drafts[:, 0], replacement)                               # (N,)
    return torch.bincount(first, minlength=C).float() / n


def _last_reached(p: torch.Tensor, q: torch.Tensor) -> int:
    """The last outcome with residual mass: where an unscaled inverse-CDF draw that runs off the end lands."""
    return int((p - q).clamp_min(0).nonzero().max()) if bool((p > q).any()) else p.shape[0] - 1


def exact_emitted(p: torch.Tensor, q: torch.Tensor, bug: str | None = None) -> torch.Tensor:
    """(C,) p and q -> (C,) exactly what one round emits first, by enumerating the drafted token: a
    draft x (from q, or q's argmax x* for ``argmax``) is kept with probability min(1, target(x)/draft(x))
    and otherwise replaced by a draw from the residual. The rule gives min(p, q) + (1 − β)·norm(max(0, p − q))
    = p; each bug (:data:`BUGS`) changes one term of it."""
    drafted = torch.zeros_like(q)
    if bug == "argmax":
        drafted[int(q.argmax())] = 1.0
    else:
        drafted = q
    target, draft = (q, p) if bug == "swapped" else (p, q)
    keep = torch.where(draft > 0, target / draft.clamp_min(1e-30), 1.0).clamp(max=1)     # (C,) min(1, ratio)
    kept = drafted * keep                                                                # (C,)
    residual = (target - draft).clamp_min(0)                                             # (C,)
    if bug == "unnormalised":
        replacement = residual.clone()
        replacement[_last_reached(p, q)] += 1 - residual.sum()
    elif residual.sum() > 0:
        replacement = residual / residual.sum()
    else:  # target == draft: nothing is ever rejected
        replacement = target
    return kept + (1 - kept.sum()) * replacement


def bug_tv(pos: DraftPosition) -> float:
    """The bug's exact total variation from p at a position (its lumped p and q): 0 where q is one-hot
    (its argmax is then a sample of q) or where p is one-hot on q's argmax."""
    _, p, q = lumped(pos)
    return tv_distance(exact_emitted(p, q, "argmax"), p)


def sample_rule_and_bug(labels: tuple[str, ...], p: torch.Tensor, q: torch.Tensor, n: int = 10_000, seed: int = 0,
                        bug: str = "argmax") -> Histogram:
    """The rule and ``bug`` each run ``n`` times on (C,) p and q, from one seeded generator."""
    generator = torch.Generator().manual_seed(seed)
    correct, wrong = emitted(p, q, n, generator), emitted(p, q, n, generator, bug=bug)
    as_tuple = lambda t: tuple(float(x) for x in t)  # noqa: E731
    return Histogram(tuple(labels), as_tuple(p), as_tuple(q), as_tuple(correct), as_tuple(wrong), n, bug)


def histogram(pos: DraftPosition, n: int = 10_000, seed: int = 0) -> Histogram:
    return sample_rule_and_bug(*lumped(pos), n, seed)
