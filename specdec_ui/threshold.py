"""The draft's confidence against acceptance, and a confidence threshold replayed on a run's rounds: the
Run tab's section under its charts (:func:`specdec.teach.theory.replay_threshold` does the counting).

A model draft stops early after a token it is less sure of than the threshold (the sidebar's draft
confidence). The section shows each tested draft's confidence against its verdict, and what the run
would have drafted, kept and spent at every threshold from the run's own up: why stopping early pays
on a CPU, where every drafted token costs a draft forward and a verification row, kept or not.
"""
from __future__ import annotations

from dataclasses import dataclass

from specdec.teach.render import plural
from specdec.teach.theory import ThresholdReplay, confidence_points, replay_threshold
from specdec.trace import RoundTrace
from specdec_ui import charts

TOP = 0.99    # the highest threshold offered: at 1 every draft is below it (one draft a round)
STEP = 0.01


@dataclass(frozen=True)
class ConfidenceRun:
    """What the section replays: a run's rounds, the threshold it ran at, and this machine's cost of
    one more verification row in ms (the slope of t(L); 0 where it was not timed)."""

    rounds: tuple[RoundTrace, ...]
    own: float
    row_ms: float

    def replay(self, tau: float) -> ThresholdReplay | None:
        return replay_threshold(list(self.rounds), tau, self.row_ms)

    def grid(self) -> list[ThresholdReplay]:
        n = round((TOP - self.own) / STEP)
        return [r for i in range(n + 1) if (r := self.replay(round(self.own + i * STEP, 4))) is not None]

    def clamp(self, tau: float | None) -> float:
        """``tau`` within what a replay of this run can show (the run's own threshold when None)."""
        return self.own if tau is None else min(max(float(tau), self.own), TOP)


def confidence_view(run: ConfidenceRun, tau: float | None = None):
    """(scatter, replay chart, text) at ``tau``; None where the run has no model-drafted chain (a
    copying drafter, a tree, verifier-only: nothing drew a confidence)."""
    asked = None if tau is None or float(tau) >= run.own - 1e-9 else float(tau)
    tau = run.clamp(tau)
    at = run.replay(tau)
    if at is None:
        return None
    points = confidence_points(list(run.rounds))
    return (charts.confidence_figure(points, tau), charts.threshold_figure(run.grid(), tau),
            threshold_text(run, tau, at, points, asked))


def _kept_share(points: list[tuple[float, bool]], words: str) -> str:
    if not points:
        return f"no tested draft was {words}"
    return f"drafts {words} were kept {sum(k for _, k in points) / len(points):.0%} of the {len(points)} times tested"


def threshold_text(run: ConfidenceRun, tau: float, at: ThresholdReplay, points, asked: float | None = None) -> str:
    """The numbers at ``tau`` beside the run's own, each defined, and what a replay is and is not;
    ``asked``: the threshold the slider asked for where it was below the run's own (shown at the run's)."""
    own = run.replay(run.own)
    below, above = [p for p in points if p[0] < tau], [p for p in points if p[0] >= tau]
    others = len(run.rounds) - at.rounds
    rounds = plural(at.rounds, "round", "rounds") + (
        f" the draft model drafted a chain in (of the run's {len(run.rounds)}: "
        f"{plural(others, 'round', 'rounds')} drafted nothing or copied, at a budget's end or a plain step)"
        if others else " (every round of the run drafted a chain)")
    refused = (f"**τ = {asked:.2f} is below this run's own threshold {run.own:.2f}**: the run never drafted past a "
               "draft less sure than that, so a replay cannot go below it (run at draft confidence 0 to replay every "
               "threshold). Shown at the run's own.\n\n" if asked is not None else "")
    row = (f" and a verification row ({run.row_ms:.1f} ms: this machine's timed cost of one more row in the "
           "verifier's forward)" if run.row_ms else "")
    same = abs(tau - run.own) < 1e-9
    lines = [
        f"**At τ = {tau:.2f}**" + (" (the run's own threshold: the replay is the run)" if same else
                                   f" (the run drafted at {run.own:.2f})") +
        f", over the {rounds}:",
        f"**{at.drafted:.2f} drafted per round** (the run: {own.drafted:.2f}); **{at.tokens:.2f} tokens per round** "
        f"(the run: {own.tokens:.2f}) = {at.kept:.2f} drafts kept + the verifier's own token",
        f"**drafting {at.draft_ms:.0f} ms a round** (the run: {own.draft_ms:.0f} ms); the round **{at.ms:.0f} ms** "
        f"→ **{at.tokens_per_s:.2f} tok/s, a prediction** (the run measured {own.tokens_per_s:.2f} tok/s over the "
        "same rounds): each draft cut saves this run's drafting time per drafted token"
        f" ({at.per_draft_ms:.0f} ms){row}" if not same else
        f"**drafting {at.draft_ms:.0f} ms a round**; the round **{at.ms:.0f} ms** → **{at.tokens_per_s:.2f} tok/s** "
        "measured over these rounds",
        f"{_kept_share(above, 'at least this sure')}; {_kept_share(below, 'less sure')}",
    ]
    why = ("*Why stop early on a CPU: every drafted token costs a draft forward and a row of the verification, "
           "kept or not; a draft the model was unsure of is kept less often, so cutting the chain there saves "
           "more time than tokens. On a GPU a verification row is nearly free; where drafting is cheap too, the "
           "trade moves towards longer drafts.*")
    caveat = ("*A replay, not a new run: the same rounds with drafting cut after the first draft less sure than "
              "τ (that draft still drafted, as the engine does); each round then emits its kept drafts up to the "
              "cut and the verifier's token, so a real run at τ would start its next rounds elsewhere and its "
              "numbers would differ a little. Thresholds below the run's own cannot be replayed (the run never "
              "drafted past a draft less sure than that): run with draft confidence 0 to replay them all.*")
    return refused + "\n".join(f"* {line}" for line in lines) + f"\n\n{why}\n\n{caveat}"
