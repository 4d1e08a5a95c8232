"""Each round's draft length chosen from what drafting costs on this machine (``--adaptive``).

A round of K drafts returns on average (a_i: the chance that draft i is kept once drafts 1..i-1 were,
the per-position acceptance of docs/notation.md)

    E(K) = 1 + a_1 + a_1·a_2 + ... + a_1·...·a_K   tokens (the 1: the verifier's own next token)

and costs, in this machine's timed milliseconds,

    T(K) = K·d + t(K + 1) + rest

with d one draft forward at one row and t(L) the verifier's
forward over L rows (interpolated between the row counts timed), both timed once per machine and cached
(:func:`specdec.decode.tree_shape.machine_costs`), and rest a round's work besides the forwards: the
cached value until the run has rounds of its own, then the median of its last :data:`REST_ROUNDS`
(sampling, the rule, the trace: it differs between a chain and the tree runs it was timed on). Before
each round the pacer drafts the K in 0..K_max with the most expected tokens per second E(K) / T(K).
K = 0 is a plain verifier step, taken whenever no draft pays: on prose with a costly draft, or when
the draft keeps missing.

Lossless: K depends only on rounds already decided, never on this round's verifier, so the number of
drafts is a stopping time of the past and the rule's guarantee holds (as for the confidence threshold).

The a_i start at a prior and then follow the counts: kept / tested at each position, every count
multiplied by :data:`DECAY` each round. The prior of a_1 is :data:`PRIOR_A`; the prior of a_i is
a_(i-1), the estimate of the position before it (each worth :data:`PRIOR_WEIGHT` tested drafts): a
position never tested yet is expected to behave like the last one that was, as the i.i.d. model of
Leviathan et al. assumes. With a fixed prior instead, a pacer drafting 2 would never test position 3,
and would stay at 2 however well the draft did. The
decay lets the choice follow a prompt that changes character (code after prose) within tens of rounds,
and lets a run that stopped drafting drift back to the prior and try again: a round of K = 0 tests
nothing, so without it a pacer that once stopped would never learn that drafting pays again.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field, replace

from specdec.trace import ACCEPTED, DraftPlan, RoundTrace

PRIOR_A = 0.6        # the chance a draft is kept before any round says otherwise
PRIOR_WEIGHT = 2.0   # worth this many tested drafts: two rounds' evidence outweighs it
DECAY = 0.95         # per round: a count 20 rounds old weighs 1/e of a new one
REST_ROUNDS = 16     # the run's last rounds whose work besides the forwards gives ``rest``


@dataclass(frozen=True)
class RoundCosts:
    """What a round costs here, in ms: ``verify`` maps the rows L of a verifier forward to its time
    (at least L = 1 and one more), ``draft`` is one draft forward at one row, ``rest`` the round's
    work besides the forwards."""

    verify: dict[int, float]
    draft: float
    rest: float = 0.0

    def __post_init__(self):
        if len(self.verify) < 2 or min(self.verify) != 1:
            raise ValueError("verify must time L = 1 and at least one more row count")

    def forward(self, rows: int) -> float:
        """t(rows): linear between the row counts timed, extended by the last segment's slope."""
        xs = sorted(self.verify)
        lo = max((x for x in xs if x <= rows), default=xs[0])
        hi = min((x for x in xs if x > lo), default=None)
        if hi is None:  # past the last timed count: the last segment's slope
            lo, hi = xs[-2], xs[-1]
        slope = (self.verify[hi] - self.verify[lo]) / (hi - lo)
        return self.verify[lo] + slope * (rows - lo)

    def round_ms(self, k: int) -> float:
        return k * self.draft + self.forward(k + 1) + self.rest

    @classmethod
    def of_machine(cls, timings: dict) -> RoundCosts:
        """From :func:`specdec.decode.tree_shape.machine_costs` (the paced drafters draft with the model)."""
        verify = {int(n): ms for n, ms in timings["verify_ms"].items()}
        return cls(verify, timings["draft_ms"]["1"], timings.get("round", 0.0))


def expected_tokens(acceptance: list[float] | tuple[float, ...], k: int) -> float:
    """E(K) = 1 + sum over i <= K of a_1···a_i."""
    total, reach = 1.0, 1.0
    for a in acceptance[:k]:
        reach *= a
        total += reach
    return total


@dataclass
class Pacer:
    """Chooses each round's K (:meth:`plan`) and learns from each round decided (:meth:`update`)."""

    costs: RoundCosts
    k_max: int
    kept: list[float] = field(default_factory=list)
    tested: list[float] = field(default_factory=list)
    rests: list[float] = field(default_factory=list)  # ms of the run's rounds besides their forwards

    def __post_init__(self):
        self.kept, self.tested = [0.0] * self.k_max, [0.0] * self.k_max

    def acceptance(self) -> tuple[float, ...]:
        """a_1..a_Kmax: each position's decayed kept / tested, with its prior's weight added (the
        prior of a_1 is PRIOR_A, of a_i the estimate a_(i-1))."""
        out, prior = [], PRIOR_A
        for kept, tested in zip(self.kept, self.tested):
            prior = (kept + PRIOR_WEIGHT * prior) / (tested + PRIOR_WEIGHT)
            out.append(prior)
        return tuple(out)

    def plan(self, limit: int) -> DraftPlan:
        """The K in 0..min(limit, K_max) with the most expected tokens per ms, and what it was chosen from."""
        a = self.acceptance()
        costs = self.costs if not self.rests else replace(self.costs, rest=statistics.median(self.rests))
        tokens = tuple(expected_tokens(a, k) for k in range(self.k_max + 1))
        ms = tuple(costs.round_ms(k) for k in range(self.k_max + 1))
        best = max(range(min(limit, self.k_max) + 1), key=lambda k: (tokens[k] / ms[k], -k))  # a tie: fewer drafts
        return DraftPlan(k=best, acceptance=a, evidence=tuple(self.tested), tokens=tokens, ms=ms)

    def update(self, r: RoundTrace) -> None:
        """Decay every count, then count the round's tested drafts (a tree round teaches nothing here)."""
        self.kept = [DECAY * x for x in self.kept]
        self.tested = [DECAY * x for x in self.tested]
        self.rests = (self.rests + [1e3 * (r.times.total - r.times.forward)])[-REST_ROUNDS:]
        if r.tree is not None:
            return
        for i, p in enumerate(r.positions[:self.k_max]):
            if p.tested:
                self.tested[i] += 1
                self.kept[i] += p.status == ACCEPTED
