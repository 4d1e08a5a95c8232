"""Each round's draft chosen from what drafting costs on this machine (``--adaptive``): a chain's
length K, or (the tree drafter) a token tree's shape, W children per expanded node and N nodes at most.

Every round drafts a tree (a chain is the tree whose nodes have one child each). Label a node by its
depth d and its rank r among its parent's children (the order they were drawn in, the order the rule
tests them in); two running shares per (d, r) say what such a node does:

    a_{d,r}  of the r-th children tested (their parent kept, or the root, and the siblings before them
             rejected), the share kept: a chain's a_d, the per-position acceptance of docs/notation.md,
             is a_{d,1}
    e_{d,r}  of the nodes expanded at depth d - 1, the share given an r-th child: the tree drafter gives a
             node as many children as it takes to cover most of its q, one where the draft is sure;
             e_{d,1} = 1

so the r-th child is kept, once its parent was, with chance (drafted, the siblings before it rejected,
then kept) c_{d,r} = e_{d,r}·(1 - a_{d,1})···(1 - a_{d,r-1})·a_{d,r}.
At most one child of a node is kept, so a round drafting the tree T returns on average

    E(T) = 1 + sum over the nodes v of T of the product of c along the path to v   tokens

(the 1: the verifier's own next token; for a chain of K, E(K) = 1 + a_1 + a_1·a_2 + ... + a_1···a_K),
and verifies on average L(T) = 1 + the same sum of products of e rows. T is the tree the drafter would
draw if its path probabilities were these chances: depth by depth the W nodes most likely kept are
expanded, each with up to W children, until depth K or N nodes. A round costs, in this machine's
timed milliseconds,

    T_ms = d(1) + d(R_1) + ... + d(R_(K-1)) + t(L(T)) + r_0 + r_d (L(T) - 1)

with d(R) one draft forward over R rows (the root's, then one per depth over the nodes it expands; a
chain's K forwards of one row: K·d(1)) and t(L) the verifier's forward over L rows, interpolated between
the row counts timed once per machine and cached (:func:`specdec.decode.tree_shape.machine_costs`), and
r_0 + r_d (L - 1) a round's work besides the forwards (sampling, the rule, the trace), which grows with
the drafts: r_0 and r_d fitted once per machine over a plain, a chain and a tree run's rounds (on an
AVX2 EPYC about 3 ms for a plain step and 3 ms more per draft, 6 and 7 ms before decoding kept its
temporaries in the heap: charging every K one round's median made a plain step look dearer than it is), and once the run has rounds of its own, r_0 moved by
the median of their differences from the line over its last :data:`REST_ROUNDS`. The timed forwards
are the fastest of a few at one context on a quiet machine; a run's are slower (longer contexts, a
neighbour's load: 20-27 % on an AVX2 EPYC, enough to flip a choice there), so once the run has
rounds every forward in the table is scaled by the median of its last rounds' measured forwards over
the table's prediction for them. Before each round the pacer drafts the chain of K in 0..K_max,
or the tree shape (:func:`specdec.decode.tree_shape.candidates`), with the most expected tokens per ms.
K = 0 is a plain verifier step, taken whenever no draft pays: on prose with a costly draft, or when the
draft keeps missing. A tree pays where second and third guesses are often the verifier's token and
verifying more rows is cheap.

Lossless: the shape depends only on rounds already decided, never on this round's verifier, so it is
settled before any draft is drawn and the rule's guarantee holds (as for the confidence threshold).

Where a plain step wins only because the evidence is thin, the first draft's share is read one
standard error higher and a draft is tried (:meth:`Pacer.plan`). The shares start at a prior and then
follow the counts, every count multiplied by :data:`DECAY` each
round. At depth 1 the prior is the i.i.d. model of Leviathan et al., each tested draft kept with chance
:data:`PRIOR_A`, and an r-th child drafted with chance :data:`PRIOR_BRANCH`^(r-1); deeper, the prior of
(d, r) is the estimate at (d - 1, r), each worth :data:`PRIOR_WEIGHT` counts: a depth never tested yet
is expected to behave like the last one that was. With a fixed prior instead, a pacer drafting 2 would
never test depth 3, and would stay at 2 however well the draft did. The decay lets the choice follow a
prompt that changes character (code after prose) within tens of rounds, and lets a run that stopped
drafting, or stopped growing trees, drift back to the prior and try again: a round of K = 0 tests
nothing and a chain tests no second child, so without it a pacer that once stopped would never learn
that drafting pays again.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field, replace

from specdec.decode.proposal import children
from specdec.trace import ACCEPTED, TESTED, DraftPlan, RoundTrace, TreeOption

PRIOR_A = 0.6        # the chance a tested draft is kept before any round says otherwise
PRIOR_BRANCH = 0.5   # the chance an expanded node is given a second child before any round says (a third: its square)
PRIOR_WEIGHT = 2.0   # worth this many counts: two rounds' evidence outweighs it
DECAY = 0.95         # per round: a count 20 rounds old weighs 1/e of a new one
REST_ROUNDS = 16     # the run's last rounds whose work besides the forwards gives ``rest``

Shares = tuple[tuple[float, ...], ...]  # (K_max, W_max): per depth, per rank


@dataclass(frozen=True)
class RoundCosts:
    """What a round costs here, in ms: ``verify`` maps the rows L of a verifier forward to its time
    (at least L = 1 and one more), ``draft`` is one draft forward at one row and ``draft_row`` each
    further row of a batched one, and the round's work besides the forwards ``rest`` plus
    ``rest_per_draft`` per drafted token (:meth:`besides`)."""

    verify: dict[int, float]
    draft: float
    rest: float = 0.0
    draft_row: float = 0.0
    rest_per_draft: float = 0.0  # the rest grows with the drafts: each one's sampling, test and record

    def __post_init__(self):
        if len(self.verify) < 2 or min(self.verify) != 1:
            raise ValueError("verify must time L = 1 and at least one more row count")

    def forward(self, rows: float) -> float:
        """t(rows): linear between the row counts timed, extended by the last segment's slope."""
        xs = sorted(self.verify)
        lo = max((x for x in xs if x <= rows), default=xs[0])
        hi = min((x for x in xs if x > lo), default=None)
        if hi is None:  # past the last timed count: the last segment's slope
            lo, hi = xs[-2], xs[-1]
        slope = (self.verify[hi] - self.verify[lo]) / (hi - lo)
        return self.verify[lo] + slope * (rows - lo)

    def besides(self, drafted: float) -> float:
        """The round's work besides its forwards with ``drafted`` tokens drafted (0: a plain step)."""
        return self.rest + self.rest_per_draft * drafted

    def drafting(self, rows: float) -> float:
        """d(rows): one draft forward over ``rows`` rows."""
        return self.draft + self.draft_row * (rows - 1)

    def scaled(self, f: float) -> RoundCosts:
        """Every forward ``f`` times as long (the rest as it is)."""
        return replace(self, verify={n: f * ms for n, ms in self.verify.items()}, draft=f * self.draft,
                       draft_row=f * self.draft_row)

    def forwards(self, drafted: int, depth: int) -> float:
        """The forwards of a round that drafted ``drafted`` tokens over ``depth`` draft forwards (a
        chain: as many as its drafts; a tree: one per depth over its nodes) and verified them."""
        return depth * self.draft + self.draft_row * (drafted - depth) + self.forward(drafted + 1)

    @classmethod
    def of_machine(cls, timings: dict) -> RoundCosts:
        """From :func:`specdec.decode.tree_shape.machine_costs` (the paced drafters draft with the model)."""
        verify = {int(n): ms for n, ms in timings["verify_ms"].items()}
        rest, per_draft = timings.get("rest_line", (timings.get("round", 0.0), 0.0))
        return cls(verify, timings["draft_ms"]["1"], rest, timings["draft"][1], per_draft)


def forecast(a: Shares, e: Shares, width: int, budget: int, depth: int, costs: RoundCosts) -> tuple[float, float]:
    """(E(T), T_ms) of the tree T at most ``width`` wide, ``budget`` nodes and ``depth`` deep that the
    shares a and e predict (the module docstring); a chain of K is width 1, budget K, depth K."""
    tokens, rows, ms = 1.0, 1.0, 0.0
    level = [(1.0, 1.0)]  # per node of the depth drafted last: the chance it is kept (the root: 1), and drafted
    for d in range(depth):
        expanded = sorted(level, reverse=True)[:width]  # the W most likely kept, as the drafter's path q ranks them
        ms += costs.drafting(sum(drafted for _, drafted in expanded))
        level = []
        for kept, drafted in expanded:
            missed = 1.0  # the chance that the siblings before the r-th child were all rejected
            for r in range(width):
                if rows - 1 + drafted * e[d][r] > budget:  # the budget is spent: the drafter stops here
                    return tokens, ms + costs.forward(rows) + costs.besides(rows - 1)
                level.append((kept * e[d][r] * missed * a[d][r], drafted * e[d][r]))
                missed *= 1 - a[d][r]
                tokens, rows = tokens + level[-1][0], rows + level[-1][1]
    return tokens, ms + costs.forward(rows) + costs.besides(rows - 1)


@dataclass
class Share:
    """A running share hits / tries, each count decayed every round, read against a prior."""

    hits: float = 0.0
    tries: float = 0.0

    def add(self, hit: bool) -> None:
        self.hits, self.tries = self.hits + hit, self.tries + 1

    def decay(self) -> None:
        self.hits, self.tries = DECAY * self.hits, DECAY * self.tries

    def read(self, prior: float) -> float:
        return (self.hits + PRIOR_WEIGHT * prior) / (self.tries + PRIOR_WEIGHT)


def _estimates(table: list[list[Share]], prior: tuple[float, ...]) -> Shares:
    """Each depth's shares with their prior's weight added: ``prior`` at depth 1, then the depth before."""
    out = []
    for row in table:
        prior = tuple(s.read(p) for s, p in zip(row, prior))
        out.append(prior)
    return tuple(out)


def _optimistic(a: Shares, table: list[list[Share]]) -> Shares:
    """The first depth's shares raised by one standard error of their evidence,
    sqrt(a (1 - a) / (tries + PRIOR_WEIGHT)): what :meth:`Pacer.plan` reads before it settles for a plain
    step. Only the first depth: a deeper one is tested only once the first is kept, so its uncertainty
    would never shrink where nothing is kept, and a draft that is never kept would be tried for ever."""
    first = tuple(min(1.0, x + (x * (1 - x) / (s.tries + PRIOR_WEIGHT)) ** 0.5) for x, s in zip(a[0], table[0]))
    return (first,) + a[1:]


@dataclass
class Pacer:
    """Chooses each round's draft (:meth:`plan`) and learns from each round decided (:meth:`update`):
    a chain of K in 0..K_max, or one of ``shapes``, the tree shapes (W, N) the tree drafter may draw."""

    costs: RoundCosts
    k_max: int
    shapes: tuple[tuple[int, int], ...] = ()
    kept: list[list[Share]] = field(default_factory=list)    # a's counts, per depth and rank
    given: list[list[Share]] = field(default_factory=list)   # e's counts
    rests: list[tuple[int, float]] = field(default_factory=list)  # (drafted, ms besides the forwards) of its last rounds
    speeds: list[float] = field(default_factory=list)  # its last rounds' forwards, measured over the table's
    timed: bool = True  # learn the rest and the forwards' speed from the run's clock (False: the costs as given)

    def __post_init__(self):
        width = max((w for w, _ in self.shapes), default=1)
        self.kept = [[Share() for _ in range(width)] for _ in range(self.k_max)]
        self.given = [[Share() for _ in range(width)] for _ in range(self.k_max)]

    def shares(self) -> tuple[Shares, Shares]:
        """(a, e) per depth and rank: the decayed counts with the prior's weight added."""
        ranks = range(len(self.kept[0]))
        return (_estimates(self.kept, tuple(PRIOR_A for _ in ranks)),
                _estimates(self.given, tuple(PRIOR_BRANCH ** r for r in ranks)))

    def plan(self, limit: int) -> DraftPlan:
        """The chain of K in 0..min(limit, K_max), or the tree at most that deep, with the most expected
        tokens per ms, and what it was chosen from. Before it settles for a plain step it asks again with
        each a raised by one standard error of its evidence (:func:`_optimistic`), and drafts if that says
        so, while the first draft's evidence weighs less than the prior (fewer than PRIOR_WEIGHT decayed
        tests). Where drafting barely pays (a CPU where verifying more rows is dear) the prior alone says
        a plain step is faster, and a pacer that never drafts never learns that this prompt's drafts are
        kept 90 % of the time: it decoded code at K = 0 from the first round to the last on an AVX2 EPYC,
        where K = 6 was 1.2x faster. So a draft is tried at the start, and again each time the counts
        have decayed below the prior's weight (every dozen or so plain steps)."""
        a, e = self.shares()
        costs = self.costs
        if self.speeds:  # the table's forwards at this run's speed (its contexts, the machine's load now)
            costs = costs.scaled(statistics.median(self.speeds))
        if self.rests:  # this run's level of the work besides the forwards, the machine's growth per draft
            offset = statistics.median(ms - costs.besides(n) for n, ms in self.rests)
            costs = replace(costs, rest=max(costs.rest + offset, 0.0))
        chosen = self._plan(a, e, limit, costs)
        if chosen.k == 0 and self.kept[0][0].tries < PRIOR_WEIGHT:  # the prior still outweighs the run's evidence
            bold = self._plan(_optimistic(a, self.kept), e, limit, costs)
            if bold.k:
                return replace(bold, explored=True)
        return chosen

    def _plan(self, a: Shares, e: Shares, limit: int, costs: RoundCosts) -> DraftPlan:
        chains = [forecast(a, e, 1, k, k, costs) for k in range(self.k_max + 1)]
        depth = min(limit, self.k_max)
        trees = tuple(TreeOption(w, n, *forecast(a, e, w, n, depth, costs)) for w, n in self.shapes) if depth else ()
        options = [(1, k, *chains[k]) for k in range(depth + 1)] + [(t.width, t.budget, t.tokens, t.ms) for t in trees]
        width, most, _, _ = max(options, key=lambda o: (o[2] / o[3], -o[1]))  # a tie: fewer drafts
        later = bool(self.shapes)  # the second and later children: a tree drafter's only
        return DraftPlan(k=most if width == 1 else depth, acceptance=tuple(row[0] for row in a),
                         evidence=tuple(row[0].tries for row in self.kept), tokens=tuple(t for t, _ in chains),
                         ms=tuple(ms for _, ms in chains), width=width, budget=0 if width == 1 else most,
                         siblings=tuple(row[1:] for row in a) if later else (),
                         branching=tuple(row[1:] for row in e) if later else (), trees=trees)

    def update(self, r: RoundTrace) -> None:
        """Decay every count, then count what the round's drafts showed: a chain's tested positions, and
        every expanded node of a tree."""
        for share in (s for row in self.kept + self.given for s in row):
            share.decay()
        drafted = len(r.tree.nodes) - 1 if r.tree is not None else len(r.positions)
        depth = max(n.depth for n in r.tree.nodes) if r.tree is not None else drafted
        if self.timed:
            self.rests = (self.rests + [(drafted, 1e3 * (r.times.total - r.times.forward))])[-REST_ROUNDS:]
            if r.times.forward > 0:
                self.speeds = (self.speeds + [1e3 * r.times.forward / self.costs.forwards(drafted, depth)])[-REST_ROUNDS:]
        if r.tree is None:
            for d, p in enumerate(r.positions[:self.k_max]):
                if p.tested:
                    self.kept[d][0].add(p.status == ACCEPTED)
            return
        nodes, width = r.tree.nodes, min(r.tree.width, len(self.kept[0]))
        kids = children([n.parent for n in nodes])
        # a full tree's last parents may have lost later children to the budget, not to a sure draft
        cut = max(n.depth for n in nodes) - 1 if len(nodes) - 1 >= r.tree.budget else -1
        for j, node in enumerate(nodes):
            if not kids[j] or node.depth >= self.k_max:
                continue
            for rank in range(1 if node.depth == cut else width):
                self.given[node.depth][rank].add(rank < len(kids[j]))
            for rank, child in enumerate(kids[j][:width]):
                if nodes[child].status in TESTED:
                    self.kept[node.depth][rank].add(nodes[child].status == ACCEPTED)
