"""What each button does: the form's values in, view records (or a Problem) out.

Plain functions and generators of a :class:`~.state.Loader`, a :class:`~.state.Session` and the
form as a dict keyed by :data:`~.state.FORM`; no gradio, so the tier-1 tests call them directly
with tiny models. The models are shared by every session through the loader and used one round at
a time: a handler that finds them busy first yields a view that says it is waiting.
"""
from __future__ import annotations

import os
import tempfile
import uuid
from dataclasses import replace
from typing import Iterator

from specdec import ConfigError, Generation, NumericalError, TraceFile
from specdec.render import first_difference, output_text, segments

from . import charts
from .state import FIELD_LABELS, Loader, Session, changes, parse_form
from .views import CompareView, Problem, RunView, StepView, field_message, plain_html, run_view, step_view, summary_markdown

NOT_READY = "The models are still loading; this works as soon as they are ready."
WAITING = "Waiting for another session's round to finish (the models are shared, one round at a time)..."


def _problem(e: Exception, form: dict | None = None) -> Problem:
    field = getattr(e, "field", None)
    p = Problem(str(e), field)
    return Problem(field_message(p, FIELD_LABELS, (form or {}).get(field, 0)), field)


def _settings(loader: Loader, form: dict):
    if loader.pair is None:
        return Problem(NOT_READY)
    try:
        return parse_form(form, loader.pair)
    except ConfigError as e:
        return _problem(e, form)


def _busy(loader: Loader) -> bool:
    return loader.pair.lock.locked()


# ---- step through one round -------------------------------------------------------------------

def step(loader: Loader, action: str, session: Session, form: dict) -> Iterator[StepView | Problem]:
    """action: draft | verify | next | step | reset (see :class:`~.state.Walkthrough`)."""
    settings = _settings(loader, form)
    if isinstance(settings, Problem):
        yield settings
        return
    notice = ""
    try:
        if action == "reset" or session.gen is None or settings != session.settings:
            if session.gen is not None and action != "reset":
                kept = len(session.walk.rounds) + session.walk.pending
                notice = (f"{', '.join(changes(session.settings, settings)) or 'Settings'} changed: the step-through "
                          f"restarted from the prompt ({kept} round{'s' * (kept != 1)} on show discarded). ")
            session.restart(settings, Generation.from_prompt(loader.pair, settings.prompt, settings.decode,
                                                             settings.drafter))
        walk = session.walk
        if walk.needs_round(action) and _busy(loader):
            yield replace(step_view(walk, settings.drafter, settings.decode.sampling.greedy, ""), status=WAITING)
        new_round = next(session.gen, None) if walk.needs_round(action) else None
    except (ConfigError, NumericalError) as e:
        yield _problem(e, form)
        return
    session.walk, said = walk.press(action, new_round, session.gen.stop_reason)
    yield step_view(session.walk, settings.drafter, settings.decode.sampling.greedy, notice + said)


# ---- run the whole generation -----------------------------------------------------------------

def run(loader: Loader, session: Session, form: dict) -> Iterator[RunView | Problem]:
    """Stream one view per round; Stop ends the run cleanly, also in the middle of a long prefill."""
    settings = _settings(loader, form)
    if isinstance(settings, Problem):
        yield settings
        return
    try:
        gen = Generation.from_prompt(loader.pair, settings.prompt, settings.decode, settings.drafter)
    except ConfigError as e:
        yield _problem(e, form)
        return
    session.stop, session.running = False, [gen]
    try:
        yield _live(gen, "Waiting for another session's round..." if _busy(loader) else
                    "Reading the prompt (the prefill)...")
        for _ in gen:
            yield _live(gen, f"Round {len(gen.rounds)}...")
            if _busy(loader):
                yield _live(gen, WAITING)
    except NumericalError as e:
        yield _problem(e)
    finally:
        session.running = []
    ended = (f"Finished ({gen.stop_reason})." if gen.stop_reason not in (None, "cancelled") else
             f"Stopped after {len(gen.rounds)} rounds.")
    trace = TraceFile(settings.to_dict(), tuple(gen.rounds), gen.prefill_s, gen.text, gen.stop_reason)
    yield _live(gen, ended, _write_trace(trace.to_json()))


def _live(gen: Generation, status: str, download: str | None = None) -> RunView:
    return run_view(gen.rounds, gen.prefill_s, status, download, gen.waited_s)


def replay(session: Session, path: str | None) -> RunView | Problem | None:
    """Show a downloaded trace (from the app or ``generate --json``) without models."""
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            trace = TraceFile.from_json(f.read())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        return Problem(f"{os.path.basename(path)}: {e}. The view above is unchanged.", "upload")
    s = trace.settings
    where = ", ".join(f"{k} {s[k]}" for k in ("target", "device", "precision") if s.get(k))
    return run_view(list(trace.rounds), trace.prefill_s,
                    f"Replayed a trace of {len(trace.rounds)} rounds ({where}); prompt: {s.get('prompt')!r}.")


def stop(session: Session) -> str:
    """End the session's run or comparison: before its next round, or inside a long prefill."""
    if not session.running:
        return "Nothing is running."
    session.stop = True
    for gen in session.running:
        gen.cancel()
    return "Stopping..."


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
        yield _problem(e, form)
        return
    session.stop, session.running = False, list(runs.values())
    greedy = settings.decode.sampling.greedy
    live = dict(runs)
    try:
        while live and not session.stop:
            if _busy(loader):
                yield replace(_compare_view(runs, greedy, finished=False), badge=WAITING)
            name = min(live, key=lambda n: live[n].rounds[-1].elapsed if live[n].rounds else 0.0)
            if next(live[name], None) is None or live[name].done:
                del live[name]
            yield _compare_view(runs, greedy, finished=not live)
    except NumericalError as e:
        yield _problem(e)
    finally:
        session.running = []
    if live or any(g.stop_reason == "cancelled" for g in runs.values()):
        yield replace(_compare_view(runs, greedy, finished=False), badge="Stopped.")


def _compare_view(runs: dict[str, Generation], greedy: bool, finished: bool) -> CompareView:
    base, spec = runs["verifier only"], runs["speculative"]
    b, s = base.summary(), spec.summary()
    badge = "Running..."
    if finished:
        speedup = (f"**Speedup {s.tokens_per_s / b.tokens_per_s:.2f}x** in tokens per second of each run's own "
                   "compute. " if b.tokens_per_s else "")
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
    return CompareView(badge, summary_markdown(b, base.rounds, base.waited_s) if base.rounds else "",
                       summary_markdown(s, spec.rounds, spec.waited_s) if spec.rounds else "",
                       plain_html(base.text), plain_html(spec.text),
                       charts.race_figure({n: g.rounds for n, g in runs.items()}))
