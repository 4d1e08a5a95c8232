"""What each button does: the form's values in, view records (or a Problem) out.

Plain functions and generators of a :class:`~.state.Loader`, a :class:`~.state.Session` and the
form as a dict keyed by :data:`~.state.FORM`; no gradio, so the tier-1 tests call them directly
with tiny models. The models are shared by every session through the loader and used one round at
a time: a handler that finds them busy first yields a view that says it is waiting.

A Run or a comparison goes on in a :class:`~.state.Worker` thread at the engine's own pace; the
handler only looks at the rounds it has produced so far, at most every ``REFRESH_S`` seconds. While
it goes the page gets the text and live charts drawn in plain HTML; the interactive plotly charts
come once, at the end: a plotly redraw costs the browser so much CPU that, every 4 s, it slowed the
engine by a fifth on a 2-core machine (``benchmarks/app_overhead.py``).
"""
from __future__ import annotations

import os
import tempfile
import uuid
from dataclasses import replace
from typing import Iterator

from specdec import ConfigError, Generation, NumericalError, RunSettings, TraceFile
from specdec.experiment import histogram
from specdec.render import plural

from . import charts
from .charts import CHAIN, SPECULATIVE, TREE, VERIFIER_ONLY
from .state import (FIELD_LABELS, TREE_FIELDS, CpuShare, Loader, Replay, Session, Worker, changes, form_defaults, form_values,
                    parse_form)
from .views import (CompareView, Problem, Replayed, RunView, SampleView, StepView, compare_view, field_message,
                    run_view, step_view)

NOT_READY = "The models are still loading; this works as soon as they are ready."
WAITING = "Waiting for another session's round to finish (the models are shared, one round at a time)..."
REFRESH_S, REFRESH_TOKENS = 1.0, 128
MAX_RUNS = 5
MAX_TRACE_BYTES = 50 * 2**20
SAMPLES = 10_000


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

def _same_run(a: RunSettings, b: RunSettings) -> bool:
    """The same run, as far as the form reads it (W and N only with the tree drafter)."""
    def read(s: RunSettings):
        return s.decode if s.drafter == "tree" else replace(s.decode, **{n: form_defaults()[n] for n in TREE_FIELDS})
    return (a.prompt, a.drafter, read(a)) == (b.prompt, b.drafter, read(b))


def _step_source(loader: Loader, session: Session, form: dict):
    """The settings and, when they are new, a fresh source of rounds: the uploaded trace while
    the form still holds its settings (no models needed), else a generation on the models."""
    if session.replay is not None:
        try:
            settings = parse_form(form)
        except ConfigError as e:
            return _problem(e, form), None
        replayed = RunSettings.from_dict(session.replay.settings)
        if _same_run(settings, replayed):
            fresh = not isinstance(session.gen, Replay) or session.gen.trace is not session.replay
            return replayed, Replay(session.replay) if fresh else None
        session.replay = None  # the learner changed a setting: leave the replay for a live run
    settings = _settings(loader, form)
    if isinstance(settings, Problem):
        return settings, None
    if session.gen is None or isinstance(session.gen, Replay) or settings != session.settings:
        return settings, Generation.from_prompt(loader.pair, settings.prompt, settings.decode, settings.drafter)
    return settings, None


def step(loader: Loader, action: str, session: Session, form: dict) -> Iterator[StepView | Problem]:
    """action: draft | verify | accept | commit | step | reset (see :class:`~.state.Walkthrough`)."""
    try:
        settings, fresh = _step_source(loader, session, form)
    except ConfigError as e:
        yield _problem(e, form)
        return
    if isinstance(settings, Problem):
        yield settings
        return
    notice = ""
    try:
        if action == "reset" and not fresh:
            fresh = Replay(session.replay) if session.replay is not None else Generation.from_prompt(
                loader.pair, settings.prompt, settings.decode, settings.drafter)
        if fresh is not None:
            if session.gen is not None and action != "reset":
                kept = len(session.walk.rounds) + session.walk.pending
                what = ("The uploaded trace" if isinstance(fresh, Replay) else
                        ", ".join(changes(session.settings, settings)) or "Settings")
                notice = (f"{what} changed: the step-through restarted from the prompt ({kept} round"
                          f"{'s' * (kept != 1)} on show discarded). ")
            session.restart(settings, fresh)
        walk = session.walk
        live = isinstance(session.gen, Generation)
        if walk.needs_round(action) and live and _busy(loader):
            yield replace(step_view(walk, settings, ""), status=WAITING)
        new_round = next(session.gen, None) if walk.needs_round(action) else None
    except (ConfigError, NumericalError) as e:
        yield _problem(e, form)
        return
    session.walk, said = walk.press(action, new_round, session.gen.stop_reason)
    source = "" if live else f"Replaying the uploaded trace (no models run), {len(session.gen.trace.rounds)} rounds. "
    yield step_view(session.walk, settings, source + notice + said)


def sample(session: Session) -> SampleView | Problem:
    """Run the pure rule 10,000 times on the deciding position of the round on show."""
    walk = session.walk
    r = walk.shown
    if r is None or walk.phase not in ("accept", "commit") or not r.tested:
        return Problem("Step a round through Accept/reject first (a round that drafted something): the rule is run "
                       "on one of its tested positions.")
    if r.tree is not None:
        return Problem("This runs the chain's rule on one drafted position; a tree round tests siblings in turn "
                       "against a moving residual instead. Pick the drafter 'draft model' to run it.")
    i = r.rejected_at if r.rejected_at is not None else r.n_accepted - 1
    pos = r.positions[i]
    h = histogram(pos, SAMPLES)
    greedy = session.settings is not None and session.settings.decode.sampling.greedy
    lines = [f"Round {r.index + 1}, position {i + 1} (drafted {pos.text!r}, {pos.status}): the rule ran "
             f"{SAMPLES:,} times on this position's p and q (its top tokens; all other tokens lumped into one), "
             "each time drafting from q, testing u ≤ p/q and drawing from the residual on a rejection.",
             f"* **The rule:** total variation from p = **{h.tv_correct:.3f}**: the emitted tokens follow p, up to "
             f"sampling noise (about {0.5 * (len(h.labels) / SAMPLES) ** 0.5:.3f} here).",
             f"* **The bug** (the draft takes q's argmax but reports softmax q): total variation = **{h.tv_bug:.3f}**."]
    if greedy:
        lines.append("At temperature 0 p and q are one-hot, so the argmax draft *is* a sample of q and both agree: "
                     "set a temperature such as 0.8 to see the bug land off p.")
    return SampleView(summary="\n".join(lines), histogram=charts.histogram_figure(h))


# ---- run the whole generation -----------------------------------------------------------------

def _follow(worker: Worker, view, gens: list[Generation]) -> Iterator:
    """Views of the work in progress, only when a round has ended (or a wait began), and at most
    one every REFRESH_S seconds per REFRESH_TOKENS tokens on show: each view redraws the whole
    text, so spacing them out as the text grows keeps the browser's work per token flat. The
    engine never waits for the page."""
    seen, interval = 0, REFRESH_S  # nothing to show before the first round ends
    while not worker.wait(interval):
        n = sum(len(g.rounds) for g in gens)
        waiting = any(g.waiting for g in gens)
        if n != seen or waiting:
            seen = n
            yield view(waiting)
        tokens = max(sum(len(r.emitted) for r in g.rounds) for g in gens)
        interval = REFRESH_S * max(1.0, tokens / REFRESH_TOKENS)


def run(loader: Loader, session: Session, form: dict) -> Iterator[RunView | Problem]:
    """Views of one generation as it goes; Stop ends it cleanly, also in the middle of a long prefill."""
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
    yield _live(gen, "Waiting for another session's round..." if _busy(loader) else
                "Reading the prompt (the prefill)...")
    cpu = CpuShare()
    worker = Worker(gen.run)

    def view(waiting: bool) -> RunView:
        rounds = list(gen.rounds)
        status = WAITING if waiting else f"Round {len(rounds)}: {sum(len(r.emitted) for r in rounds)} tokens..."
        return _live(gen, status, rounds=rounds, final=False)
    yield from _follow(worker, view, [gen])
    session.running = []
    if worker.error is not None:
        yield _problem(worker.error)
        return
    ended = (f"Finished ({gen.stop_reason})." if gen.stop_reason not in (None, "cancelled") else
             f"Stopped after {plural(len(gen.rounds), 'round', 'rounds')}.")
    ran = replace(settings, decode=gen.cfg)  # the tree shape that ran, not 0 for "this machine's choice"
    trace = TraceFile(ran.to_dict(), tuple(gen.rounds), gen.prefill_s, gen.text, gen.stop_reason)
    yield _live(gen, ended, _write_trace(trace.to_json()), others=cpu.others())


def _live(gen: Generation, status: str, download: str | None = None, rounds=None, final: bool = True,
          others: float | None = None) -> RunView:
    return run_view(list(gen.rounds) if rounds is None else rounds, gen.prefill_s, status, download, gen.waited_s,
                    final, others)


def replay(session: Session, path: str | None) -> Replayed | Problem | None:
    """Show a downloaded trace (from the app or ``generate --json``) without models, restore its
    settings into the form and make it the step-through's source of rounds."""
    if not path:
        return None
    name = os.path.basename(path)
    try:
        if os.path.getsize(path) > MAX_TRACE_BYTES:
            raise ValueError(f"larger than {MAX_TRACE_BYTES // 2**20} MB, so not a trace this app wrote")
        with open(path, encoding="utf-8") as f:
            trace = TraceFile.from_json(f.read())
        settings = RunSettings.from_dict(trace.settings)
    except UnicodeDecodeError:
        return Problem(f"{name}: not a specdec trace file (not UTF-8 text). The view above is unchanged.", "upload")
    except (OSError, ValueError) as e:  # ConfigError is a ValueError: settings no run could have had
        return Problem(f"{name}: {e}. The view above is unchanged.", "upload")
    session.replay = trace
    s = trace.settings
    where = ", ".join(f"{k} {s[k]}" for k in ("target", "device", "precision") if s.get(k))
    view = run_view(list(trace.rounds), trace.prefill_s,
                    f"Replayed a trace of {len(trace.rounds)} rounds ({where}); prompt: {s.get('prompt')!r}. Its "
                    "settings are in the sidebar; the Step through tab steps through it round by round.")
    return Replayed(view, form_values(settings))


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

def _runs(value) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not (isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_RUNS):
        shown = "empty" if value is None else f"{value!r}"
        raise ConfigError(f"runs must be a whole number in [1, {MAX_RUNS}] (got {shown})", "runs")
    return value


def _differences(pair, pairs: list[dict]) -> dict:
    """Per speculative side, the first pair of greedy runs whose output differs from verifier-only,
    explained (:func:`specdec.exactness.explain`: a near-tie or a bug)."""
    from specdec.exactness import explain
    base, *specs = list(pairs[0])
    out = {}
    for n in specs:
        for p in pairs:
            d = explain(pair, p[base].prompt_ids, p[base].token_ids, p[n].token_ids)
            if d is not None:
                out[n] = d
                break
    return out


def compare(loader: Loader, session: Session, form: dict, runs=1) -> Iterator[CompareView | Problem]:
    """``runs`` pairs of runs (seeds seed, seed + 1, ...), each pair advancing in turn, always the
    run that is behind in its own elapsed time, so both see the same state of the machine. At a
    temperature above 0 both runs of a pair generate exactly max-new-tokens tokens (a stop token
    does not end them): equal work, so that their times per token compare like for like. With the
    tree drafter each group races three runs: verifier only, a chain (the draft model, the same K
    and settings) and the tree."""
    settings = _settings(loader, form)
    if isinstance(settings, Problem):
        yield settings
        return
    try:
        n_runs = _runs(runs)
        greedy = settings.decode.sampling.greedy
        sides = (((VERIFIER_ONLY, "none"), (CHAIN, "model"), (TREE, "tree")) if settings.drafter == "tree" else
                 ((VERIFIER_ONLY, "none"), (SPECULATIVE, settings.drafter)))
        pairs = []
        for i in range(n_runs):
            cfg = replace(settings.decode, seed=settings.decode.seed + i, ignore_eos=not greedy)
            pairs.append({name: Generation.from_prompt(loader.pair, settings.prompt, cfg, drafter)
                          for name, drafter in sides})
    except ConfigError as e:
        yield _problem(e, {**form, "runs": runs})
        return
    gens = [g for p in pairs for g in p.values()]
    session.stop, session.running = False, gens

    def race() -> None:
        for p in pairs:
            live = dict(p)
            while live and not session.stop:
                name = min(live, key=lambda n: live[n].rounds[-1].elapsed if live[n].rounds else 0.0)
                if next(live[name], None) is None or live[name].done:
                    del live[name]
    def view(waiting: bool, finished: bool = False) -> CompareView:
        v = compare_view(pairs, settings, finished)
        return replace(v, badge=WAITING) if waiting else v
    yield view(False)
    worker = Worker(race)
    yield from _follow(worker, view, gens)
    session.running = []
    if worker.error is not None:
        yield _problem(worker.error)
        return
    stopped = session.stop or any(g.stop_reason == "cancelled" for g in gens)
    differences = {} if stopped or not greedy else _differences(loader.pair, pairs)
    final = compare_view(pairs, settings, not stopped, final=True, differences=differences)
    yield replace(final, badge="Stopped.") if stopped else final
