"""What each button does: the form's values in, a view record (or a Problem) out.

Plain functions of a :class:`~.state.Loader`, a :class:`~.state.Session` and the form as a dict
keyed by :data:`~.state.FORM`; no gradio, so the tier-1 tests call them directly with tiny models.
The models are shared by every session through the loader; the engine serialises their use per round.
"""
from __future__ import annotations

import os
import tempfile
import uuid
from typing import Iterator

from specdec import ConfigError, Generation, NumericalError, TraceFile
from specdec.render import first_difference, segments, summary_text

from . import charts
from .state import Loader, Session, Walkthrough, parse_form
from .views import CompareView, Problem, RunView, StepView, run_view, step_view

NOT_READY = "the models are still loading; this works as soon as they are ready"


def _settings(loader: Loader, form: dict):
    if loader.pair is None:
        return Problem(NOT_READY)
    try:
        return parse_form(form, loader.pair)
    except ConfigError as e:
        return Problem(str(e), e.field)


# ---- step through one round -------------------------------------------------------------------

def step(loader: Loader, action: str, session: Session, form: dict) -> StepView | Problem:
    """action: draft | verify | next | step | reset (see :class:`~.state.Walkthrough`)."""
    settings = _settings(loader, form)
    if isinstance(settings, Problem):
        return settings
    notice = ""
    try:
        if action == "reset" or session.gen is None or settings != session.settings:
            if session.gen is not None and action != "reset":
                notice = "Settings changed: started a new generation. "
            session.restart(settings, Generation.from_prompt(loader.pair, settings.prompt, settings.decode,
                                                             settings.drafter))
        walk = session.walk
        new_round = next(session.gen, None) if walk.needs_round(action) else None
    except (ConfigError, NumericalError) as e:
        return Problem(str(e), getattr(e, "field", None))
    session.walk, said = walk.press(action, new_round, session.gen.stop_reason)
    return step_view(session.walk, settings.drafter, settings.decode.sampling.greedy, notice + said)


# ---- run the whole generation -----------------------------------------------------------------

def run(loader: Loader, session: Session, form: dict) -> Iterator[RunView | Problem]:
    """Stream one view per round; Stop ends the run cleanly after the round in progress."""
    settings = _settings(loader, form)
    if isinstance(settings, Problem):
        yield settings
        return
    try:
        gen = Generation.from_prompt(loader.pair, settings.prompt, settings.decode, settings.drafter)
    except ConfigError as e:
        yield Problem(str(e), e.field)
        return
    session.stop, session.running = False, True
    try:
        for _ in gen:
            yield _live(session, gen, f"Round {len(gen.rounds)}...")
            if session.stop:
                break
    except NumericalError as e:
        yield Problem(str(e))
    finally:
        session.running = False
    ended = f"Finished ({gen.stop_reason})." if gen.done else f"Stopped after {len(gen.rounds)} rounds."
    trace = TraceFile(settings.to_dict(), tuple(gen.rounds), gen.prefill_s, gen.text, gen.stop_reason)
    yield _live(session, gen, ended, _write_trace(trace.to_json()))


def _live(session: Session, gen: Generation, status: str, download: str | None = None) -> RunView:
    session.run_segments = segments(gen.rounds)
    return run_view(gen.rounds, gen.prefill_s, status, download)


def replay(session: Session, path: str | None) -> RunView | Problem | None:
    """Show a downloaded trace (from the app or ``generate --json``) without models."""
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            trace = TraceFile.from_json(f.read())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        return Problem(str(e), "upload")
    s = trace.settings
    where = ", ".join(f"{k} {s[k]}" for k in ("target", "device", "precision") if s.get(k))
    session.run_segments = segments(list(trace.rounds))
    return run_view(list(trace.rounds), trace.prefill_s,
                    f"Replayed a trace of {len(trace.rounds)} rounds ({where}); prompt: {s.get('prompt')!r}.")


def stop(session: Session) -> str:
    """Ask the session's run or comparison to end after the round in progress."""
    if not session.running:
        return "Nothing is running."
    session.stop = True
    return "Stopping after the current round..."


def _write_trace(text: str) -> str:
    """A file for the download button (gradio serves a copy from its own cache)."""
    folder = os.path.join(tempfile.gettempdir(), "specdec-traces")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"specdec-trace-{uuid.uuid4().hex[:12]}.json")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


# ---- verifier only vs speculative -------------------------------------------------------------

def compare(loader: Loader, session: Session, form: dict) -> Iterator[CompareView | Problem]:
    """Both runs advance in turn, always the one that is behind in its own elapsed time, so the
    race chart fills in step; each round's time is measured inside the engine, waiting excluded."""
    settings = _settings(loader, form)
    if isinstance(settings, Problem):
        yield settings
        return
    try:
        runs = {name: Generation.from_prompt(loader.pair, settings.prompt, settings.decode, drafter)
                for name, drafter in (("verifier only", "none"), ("speculative", settings.drafter))}
    except ConfigError as e:
        yield Problem(str(e), e.field)
        return
    session.stop, session.running = False, True
    live = dict(runs)
    try:
        while live and not session.stop:
            name = min(live, key=lambda n: live[n].rounds[-1].elapsed if live[n].rounds else 0.0)
            if next(live[name], None) is None or live[name].done:
                del live[name]
            yield _compare_view(runs, settings.decode.sampling.greedy, finished=not live)
    except NumericalError as e:
        yield Problem(str(e))
    finally:
        session.running = False
    if live:
        view = _compare_view(runs, settings.decode.sampling.greedy, finished=False)
        yield CompareView(**{**view.__dict__, "badge": "Stopped."})


def _compare_view(runs: dict[str, Generation], greedy: bool, finished: bool) -> CompareView:
    base, spec = runs["verifier only"], runs["speculative"]
    b, s = base.summary(), spec.summary()
    badge = "Running..."
    if finished:
        speedup = f"**Speedup {s.tokens_per_s / b.tokens_per_s:.2f}x** in tokens/s. " if b.tokens_per_s else ""
        if not greedy:
            badge = ("Sampling (temperature > 0): the two outputs differ by design; each is a sample from the "
                     "verifier's p.")
        else:
            diff = first_difference(base.token_ids, spec.token_ids)
            badge = ("✓ **Identical output**: speculative decoding reproduced the verifier's greedy tokens exactly."
                     if diff is None else f"≠ **Outputs differ** from token {diff + 1} on. At temperature 0 this "
                     "happens at a tie or near-tie of the verifier's top logits, where a forward over K+1 positions "
                     "and a single-token one can round differently and pick different argmaxes.")
        badge = speedup + badge
    return CompareView(base.text, spec.text, summary_text(b), summary_text(s), badge,
                       charts.race_figure({n: g.rounds for n, g in runs.items()}))
