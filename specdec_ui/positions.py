"""The tested positions of the round on show in Step through: where its sampler runs the rule 10,000 times,
and what the Rule tab loads from it.

At each tested position the argmax bug (the draft takes q's argmax but reports softmax q) lands at an
exact total variation from p (:func:`specdec.teach.experiment.bug_tv`); SAMPLES rounds of it can tell
that from p only where it exceeds the noise bound of SAMPLES rounds there
(:func:`specdec.teach.experiment.tv_noise_bound`, docs/notation.md). The position where it exceeds
it most is the one shown unless the learner picks another.
"""
from __future__ import annotations

from specdec.teach.experiment import bug_tv, lumped, tv_noise_bound
from specdec_ui.state import Session

SAMPLES = 10_000
FLAT_TV = 0.01  # below this exact total variation the bug's histogram cannot be told from p's by eye


def sampled_round(session: Session):
    """The round on show when the sampler can run on it (a decided chain round that tested a draft), else None."""
    r = session.walk.shown
    ok = r is not None and session.walk.phase in ("accept", "commit") and r.tested and r.tree is None
    return r if ok else None


def tested(r) -> dict[int, tuple[float, float]]:
    """Per tested position of a round (1-based): the argmax bug's exact total variation from p, and the
    noise bound of SAMPLES rounds there."""
    return {i + 1: (bug_tv(pos), tv_noise_bound(lumped(pos)[1], SAMPLES)) for i, pos in enumerate(r.positions)
            if pos.tested}


def beyond(tv: float, bound: float) -> bool:
    """The bug's exact distance from p shows in SAMPLES rounds: past the noise bound, and more than rounding."""
    return tv > bound and tv >= FLAT_TV


def default_position(positions: dict[int, tuple[float, float]]) -> int:
    """The tested position where the bug's exact total variation most exceeds the noise bound."""
    return max(positions, key=lambda i: positions[i][0] - positions[i][1])


def sample_positions(session: Session) -> tuple[list[tuple[str, int]], int | None]:
    """The picker's choices for the round on show, (label, 1-based position) per tested position, and
    the one the sampler takes unless the learner picks another; ([], None) when there is nothing to sample."""
    r = sampled_round(session)
    if r is None:
        return [], None
    at = tested(r)
    default = default_position(at)
    choices = []
    for i, (tv, bound) in at.items():
        where = "beyond" if beyond(tv, bound) else "within"
        mark = " (farthest beyond the noise)" if i == default and where == "beyond" else ""
        choices.append((f"{i}: {r.positions[i - 1].text!r}, {r.positions[i - 1].status}: the argmax bug's exact TV "
                        f"{tv:.3f}, {where} the noise bound {bound:.3f}{mark}", i))
    return choices, default
