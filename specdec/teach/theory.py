"""The expected gain of speculation (Leviathan et al. 2023, Section 3), fed with measured costs.

If every draft is kept independently with the same probability a (i.i.d.), a round of K drafts
emits E(a, K) = (1 - a^(K+1)) / (1 - a) tokens (Section 3.1, equation 1). In units of one
verifier-only step t1, drafting costs c per drafted token and a round's verification (K+1 rows,
with the accept/reject and rollback around it) costs v(K), so the speed-up is

    S(K) = E(a, K) / (K c + v(K))

(Section 3.3: Definition 3.7 defines c, and Theorem 3.8 is S with v = 1; on a CPU a K+1-row
verification costs more than a step, so v is measured). :class:`CostModel` is the one place c,
v(K) and S(K) are computed, from traced rounds: t1 from a verifier-only run, c from a speculative
run, and v(K) from a line fitted (:func:`specdec.model.timing.fit_line`) to every round's time
outside drafting against the rows it verified. The names and why t1 is measured, not fitted, are
on docs/notation.md.

Pure functions of :class:`~specdec.trace.RoundTrace` records: no model, no UI.
"""
from __future__ import annotations

from dataclasses import dataclass

from specdec.model.timing import fit_line
from specdec.trace import ACCEPTED, AFTER_STOP, RoundTrace


def tokens_per_round(a: float, k: int) -> float:
    """E(a, K) = (1 - a^(K+1)) / (1 - a): expected tokens per round when every draft is kept
    independently with the same probability a (i.i.d.)."""
    return k + 1.0 if a >= 1 else (1 - a ** (k + 1)) / (1 - a)


def round_timeline(k: int, c: float, v: float) -> list[tuple[str, str, float, float]]:
    """One speculative round against plain decoding over the same time, in verifier-only steps:
    (lane, label, start, duration) per forward. The round is K draft forwards at c each, then one
    verification of K+1 rows at v = v(K); plain decoding is one step per token."""
    spec = [("speculative", f"draft {i + 1}", i * c, c) for i in range(k)]
    spec.append(("speculative", f"verify K+1 = {k + 1} rows", k * c, v))
    total = k * c + v
    plain = [("plain", f"token {i + 1}", float(i), min(1.0, total - i)) for i in range(int(-(-total // 1)))]
    return spec + plain


def tokens_per_round_drafted(a: float, drafted: list[int]) -> float:
    """E(a, K_r) averaged over rounds that drafted K_r tokens each: the theory for adaptive K."""
    return sum(tokens_per_round(a, k) for k in drafted) / len(drafted) if drafted else 1.0


def running_acceptance(rounds: list[RoundTrace]) -> list[float]:
    """a after each round: drafts kept / drafts tested so far (a draft after a rejection is never
    tested). The one place kept / tested is computed; the run charts draw this series."""
    kept = tested = 0
    out = []
    for r in rounds:
        kept += r.n_accepted
        tested += r.tested
        out.append(kept / tested if tested else 0.0)
    return out


def acceptance(rounds: list[RoundTrace]) -> float:
    """a = drafts kept / drafts tested over all ``rounds``: the a of E(a, K) and S(K)."""
    return running_acceptance(rounds)[-1] if rounds else 0.0


def _decode_time(rounds: list[RoundTrace]) -> float:
    return sum(r.times.total for r in rounds)


def decode_tokens_per_s(rounds: list[RoundTrace]) -> float:
    """Tokens per second of the rounds alone: the prefill (reading the prompt) excluded."""
    t = _decode_time(rounds)
    return sum(len(r.emitted) for r in rounds) / t if t > 0 else 0.0


@dataclass(frozen=True)
class CostModel:
    """What a verifier-only run and a speculative run of the same settings measured (seconds,
    rounds), and the theory's c, v(K) and S(K) from them (docs/notation.md)."""

    t1: float               # a verifier-only step, measured: seconds per token of the verifier-only run
    draft_per_token: float  # drafting seconds per drafted token, in the speculative run
    verify_fixed: float     # a round's time outside drafting = verify_fixed + verify_per_row·L seconds, fitted
    verify_per_row: float   # over every round of both runs; L = the rows verified (drafts + 1; verifier-only: 1)
    a: float                # acceptance, kept / tested, of the speculative run
    k_mean: float           # drafts per round, on average
    measured: float         # the measured speed-up: verifier-only decode time per token / speculative's

    @property
    def c(self) -> float:
        """A drafted token's cost, in verifier-only steps."""
        return self.draft_per_token / self.t1

    def v(self, k: int) -> float:
        """A round's verification at K drafts (K+1 rows, with the accept/reject and rollback around
        it), in verifier-only steps: the fitted line at L = K + 1 over t1."""
        return (self.verify_fixed + self.verify_per_row * (k + 1)) / self.t1

    def speedup(self, k: int, a: float | None = None) -> float:
        """S(K) = E(a, K) / (K c + v(K)) for a constant K; ``a`` defaults to the run's."""
        return tokens_per_round(self.a if a is None else a, k) / (k * self.c + self.v(k))

    def best_k(self, k_max: int, a: float | None = None) -> int:
        """The K in 1..k_max with the largest S(K)."""
        return max(range(1, k_max + 1), key=lambda k: self.speedup(k, a))


def cost_model(base: list[RoundTrace], spec: list[RoundTrace]) -> CostModel | None:
    """The costs of ``spec`` (speculative) against ``base`` (verifier-only, same settings); None
    when either has no rounds or ``spec`` drafted nothing. ``spec`` may pool runs of several K:
    the line then has a point at every K + 1."""
    drafted = sum(r.drafted for r in spec)
    if not base or not spec or not drafted:
        return None
    t1 = _decode_time(base) / sum(len(r.emitted) for r in base)
    verify = lambda r: r.times.total - r.times.draft  # noqa: E731 - everything but drafting
    rows = [1.0] * len(base) + [r.drafted + 1.0 for r in spec]  # every traced round is a point
    fixed, per_row = fit_line(rows, [verify(r) for r in base + spec])
    measured = decode_tokens_per_s(spec) / decode_tokens_per_s(base)
    return CostModel(t1, sum(r.times.draft for r in spec) / drafted, fixed, per_row, acceptance(spec),
                     drafted / len(spec), measured)


# ---- a confidence threshold, replayed on a run's rounds -------------------------------------------

def confident_chains(rounds: list[RoundTrace]) -> list[RoundTrace]:
    """The rounds a confidence threshold decides: chains the draft model drew, each drafted token with
    the confidence (its untempered top probability) the draft read. Trees, copied drafts (lookup,
    suffix: nothing was drawn, no confidence) and plain steps are not among them."""
    return [r for r in rounds if r.tree is None and r.drafted and
            all(p.confidence is not None for p in r.positions if p.status != AFTER_STOP)]


def confidence_points(rounds: list[RoundTrace]) -> list[tuple[float, bool]]:
    """(confidence, kept) of every tested draft of :func:`confident_chains`: the draft's own certainty
    against what the rule made of it. Untested drafts (after a rejection or a stop token) decide nothing."""
    return [(p.confidence, p.status == ACCEPTED) for r in confident_chains(rounds) for p in r.positions if p.tested]


@dataclass(frozen=True)
class ThresholdReplay:
    """A run's chains replayed as if drafting had stopped after the first token less sure than ``tau``
    (:func:`replay_threshold`); every number per round, over the ``rounds`` replayed."""

    tau: float
    rounds: int
    drafted: float   # tokens drafted per round
    kept: float      # drafts kept per round
    tokens: float    # tokens emitted per round: the kept drafts and the verifier's own token
    ms: float        # the round's time: measured, less what each draft not drafted would have cost
    draft_ms: float  # of which drafting
    per_draft_ms: float  # the run's drafting time per drafted token: what each draft cut saves, with its row

    @property
    def tokens_per_s(self) -> float:
        return 1e3 * self.tokens / self.ms if self.ms > 0 else 0.0


def replay_threshold(rounds: list[RoundTrace], tau: float, row_ms: float = 0.0) -> ThresholdReplay | None:
    """The chains of ``rounds`` (:func:`confident_chains`) replayed at the confidence threshold ``tau``:
    a round drafts until the first token whose confidence is below ``tau`` (that token still drafted,
    as the engine does) or until it drafted what it did. Its kept drafts are those of the run up to
    there; each draft cut is kept or not as in the run, so the round emits min(kept, drafted) + 1
    tokens (none added where the run's round ended at a kept stop token and the cut leaves it in).
    Its time: the round's measured time less, for each draft cut, the run's drafting time per drafted
    token and ``row_ms`` (a verification row's cost on this machine, the slope of t(L)).

    A replay, not a new run: the same rounds, so a round cut short does not start the next round
    earlier, and the rounds a real run at ``tau`` would have are not these. It is only defined for
    ``tau`` at or above the run's own threshold: below it the run stopped drafting where the replay
    would go on, and those drafts were never drawn. At the run's own threshold it is the run itself.
    None when no round is a confident chain."""
    chains = confident_chains(rounds)
    drafted_run = sum(r.drafted for r in chains)
    if not chains or not drafted_run:
        return None
    per_draft_ms = 1e3 * sum(r.times.draft for r in chains) / drafted_run
    drafted = kept = tokens = ms = draft_ms = 0.0
    for r in chains:
        sure = [p.confidence for p in r.positions if p.status != AFTER_STOP]
        d = next((i + 1 for i, c in enumerate(sure) if c < tau), len(sure))
        k = min(r.n_accepted, d)
        stopped = r.next_kind is None and k == r.n_accepted  # the run's kept stop token is still among them
        cut = len(sure) - d
        drafted, kept, tokens = drafted + d, kept + k, tokens + k + (0 if stopped else 1)
        ms += 1e3 * r.times.total - cut * (per_draft_ms + row_ms)
        draft_ms += 1e3 * r.times.draft - cut * per_draft_ms
    n = len(chains)
    return ThresholdReplay(tau, n, drafted / n, kept / n, tokens / n, ms / n, draft_ms / n, per_draft_ms)
