"""Typed, frozen records of a run: one :class:`RoundTrace` per draft/verify round, and a summary.

The engine yields these and never prints; the CLI, the app, the benchmarks and the notebooks only
render or aggregate them. ``to_dict``/``from_dict`` give the JSON trace format the app downloads
and replays without models.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

PHASES = ("draft", "verify", "accept", "rollback", "other")

# Status of a drafted position; the kind of the token that ends a round.
ACCEPTED, REJECTED, UNREACHED = "accepted", "rejected", "unreached"
RESAMPLED, BONUS = "resampled", "bonus"


@dataclass(frozen=True)
class TokenProb:
    token_id: int
    text: str
    prob: float


@dataclass(frozen=True)
class DraftPosition:
    """One drafted token and what the verifier made of it."""

    token_id: int
    text: str
    q: float                      # draft probability of the token
    p: float                      # verifier probability of the token
    ratio: float                  # p / q; kept iff u <= ratio
    u: float                      # the uniform draw in (0, 1]
    beta: float                   # sum_v min(p(v), q(v)): expected acceptance here, free of coin-flip noise
    status: str                   # accepted | rejected | unreached (after the first rejection)
    target_top: tuple[TokenProb, ...]
    draft_top: tuple[TokenProb, ...]


@dataclass(frozen=True)
class PhaseTimes:
    """Wall seconds per phase of a round; ``forward`` is the model-forward part of draft + verify."""

    draft: float = 0.0
    verify: float = 0.0
    accept: float = 0.0
    rollback: float = 0.0
    other: float = 0.0
    forward: float = 0.0

    @property
    def total(self) -> float:
        return self.draft + self.verify + self.accept + self.rollback + self.other


@dataclass(frozen=True)
class RoundTrace:
    index: int
    context_len: int                       # committed tokens (prompt included) before the round
    positions: tuple[DraftPosition, ...]   # the K drafted tokens (K may shrink near a limit; 0 for the baseline)
    n_accepted: int
    rejected_at: int | None                # index into positions, or None when all were kept
    next_kind: str                         # resampled | bonus
    next_token: TokenProb                  # prob under the distribution it was drawn from
    next_top: tuple[TokenProb, ...]        # top of that distribution (residual, or p for the bonus)
    committed: tuple[int, ...]             # ids committed this round (cut at EOS / max_new_tokens)
    pieces: tuple[str, ...]                # output text of each committed id; joined over rounds = the text
    target_cache: tuple[int, int]          # verifier KV length (after the forward, after rollback)
    draft_cache: tuple[int, int] | None    # draft KV length likewise; None without a draft model
    times: PhaseTimes
    elapsed: float                         # seconds since the run started, at the end of this round

    @property
    def drafted(self) -> int:
        return len(self.positions)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> RoundTrace:
        top = lambda xs: tuple(TokenProb(**x) for x in xs)  # noqa: E731
        pos = tuple(DraftPosition(**{**x, "target_top": top(x["target_top"]), "draft_top": top(x["draft_top"])})
                    for x in d["positions"])
        return cls(**{**d, "positions": pos, "next_token": TokenProb(**d["next_token"]),
                      "next_top": top(d["next_top"]), "committed": tuple(d["committed"]),
                      "pieces": tuple(d["pieces"]), "target_cache": tuple(d["target_cache"]),
                      "draft_cache": None if d["draft_cache"] is None else tuple(d["draft_cache"]),
                      "times": PhaseTimes(**d["times"])})


@dataclass(frozen=True)
class RunSummary:
    new_tokens: int
    wall_s: float                  # prefill + all rounds
    prefill_s: float
    tokens_per_s: float
    rounds: int
    target_forwards: int           # prefill included
    drafted: int
    accepted: int
    acceptance_rate: float         # accepted / drafted
    mean_tokens_per_round: float
    per_position_acceptance: tuple[float, ...]  # P(position i kept | position i reached and drafted)
    accepted_histogram: tuple[int, ...]         # rounds that kept 0, 1, ..., K drafted tokens
    phase_totals: dict = field(default_factory=dict)
    overhead_share: float = 0.0    # share of wall time outside model forwards

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> RunSummary:
        names = {f.name for f in fields(cls)}
        d = {k: v for k, v in d.items() if k in names}
        return cls(**{**d, "per_position_acceptance": tuple(d["per_position_acceptance"]),
                      "accepted_histogram": tuple(d["accepted_histogram"])})


def summarize(rounds: list[RoundTrace], prefill_s: float = 0.0) -> RunSummary:
    new_tokens = sum(len(r.committed) for r in rounds)
    wall = prefill_s + sum(r.times.total for r in rounds)
    drafted = sum(r.drafted for r in rounds)
    accepted = sum(r.n_accepted for r in rounds)
    k_max = max((r.drafted for r in rounds), default=0)
    reached = [0] * k_max
    kept = [0] * k_max
    hist = [0] * (k_max + 1)
    for r in rounds:
        hist[r.n_accepted] += 1
        for i, pos in enumerate(r.positions):
            if pos.status != UNREACHED:
                reached[i] += 1
                kept[i] += pos.status == ACCEPTED
    totals = {ph: sum(getattr(r.times, ph) for r in rounds) for ph in PHASES}
    forward = sum(r.times.forward for r in rounds) + prefill_s
    totals["prefill"] = prefill_s
    return RunSummary(
        new_tokens=new_tokens,
        wall_s=wall,
        prefill_s=prefill_s,
        tokens_per_s=new_tokens / wall if wall > 0 else 0.0,
        rounds=len(rounds),
        target_forwards=len(rounds) + (1 if prefill_s > 0 else 0),
        drafted=drafted,
        accepted=accepted,
        acceptance_rate=accepted / drafted if drafted else 0.0,
        mean_tokens_per_round=new_tokens / len(rounds) if rounds else 0.0,
        per_position_acceptance=tuple(k / n if n else 0.0 for k, n in zip(kept, reached)),
        accepted_histogram=tuple(hist),
        phase_totals=totals,
        overhead_share=max(0.0, 1 - forward / wall) if wall > 0 else 0.0,
    )
