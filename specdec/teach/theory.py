"""The expected gain of speculation (Leviathan et al. 2023, Section 3), fed with measured costs.

With i.i.d. acceptance a and K drafts a round emits E(a, K) = (1 - a^(K+1)) / (1 - a) tokens
(Section 3.1, eq. 1). In units of one verifier-only step (time t1 per token), drafting costs c per
drafted token and a round's verification (K+1 positions, with the accept/reject and rollback
around it) costs v(K), so the speed-up is

    S(K) = E(a, K) / (K c + v(K))

(the paper's Theorem 3.8 takes v = 1; on a CPU a K+1-row forward costs more than a 1-row one, so
v is measured). Everything here is computed from the phase times of runs the engine traced: c
and v from a speculative run, t1 from a verifier-only run of the same settings, v(K) from a
straight-line fit of the verification time over the rows it covered, t(L) = t_f + t_r L
(:func:`specdec.model.timing.fit_line`). The names are those of docs/notation.md.

Pure functions of :class:`~specdec.trace.RoundTrace` records: no model, no UI.
"""
from __future__ import annotations

from dataclasses import dataclass

from specdec.model.timing import fit_line
from specdec.trace import RoundTrace


def tokens_per_round(a: float, k: int) -> float:
    """E(a, K) = (1 - a^(K+1)) / (1 - a): expected tokens per round for i.i.d. acceptance a."""
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
    """What one speculative run and one verifier-only run measured, in seconds and rounds."""

    t1: float            # verifier-only: seconds per token (one round = one token)
    draft_per_token: float  # speculative: drafting seconds per drafted token
    t_f: float           # verification (forward, accept/reject, rollback, other) = t_f + t_r L seconds,
    t_r: float           # L = the rows the verifier read (drafts + 1)
    a: float             # acceptance, kept / tested
    k_mean: float        # drafts per round, on average
    measured: float      # the speculative run's decode speed-up over the verifier-only run

    @property
    def c(self) -> float:
        """A drafted token's cost, in verifier-only steps."""
        return self.draft_per_token / self.t1

    def v(self, k: int) -> float:
        """A round's verification at K drafts (K+1 rows), in verifier-only steps."""
        return (self.t_f + self.t_r * (k + 1)) / self.t1

    def speedup(self, k: int) -> float:
        """S(K) = E(a, K) / (K c + v(K)) for a constant K."""
        return tokens_per_round(self.a, k) / (k * self.c + self.v(k))

    def best_k(self, k_max: int) -> int:
        return max(range(1, k_max + 1), key=self.speedup)



def cost_model(base: list[RoundTrace], spec: list[RoundTrace]) -> CostModel | None:
    """The costs of ``spec`` (speculative) against ``base`` (verifier-only, same settings); None
    when either has no rounds or ``spec`` drafted nothing."""
    drafted = sum(r.drafted for r in spec)
    if not base or not spec or not drafted:
        return None
    t1 = _decode_time(base) / sum(len(r.emitted) for r in base)
    verify = lambda r: r.times.total - r.times.draft  # noqa: E731 - everything but drafting
    rows = [1.0] * len(base) + [r.drafted + 1.0 for r in spec]  # every traced round is a point
    t_f, t_r = fit_line(rows, [verify(r) for r in base + spec])
    measured = decode_tokens_per_s(spec) / decode_tokens_per_s(base)
    return CostModel(t1, sum(r.times.draft for r in spec) / drafted, t_f, t_r, acceptance(spec),
                     drafted / len(spec), measured)
