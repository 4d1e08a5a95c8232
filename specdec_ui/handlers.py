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
from functools import partial
from typing import Iterator

from specdec import (
    ConfigError,
    DecodeConfig,
    Generation,
    NumericalError,
    RunSettings,
    TraceFile,
)
from specdec.decode.start import start
from specdec.teach.experiment import bug_tv, histogram, lumped, tv_noise_bound
from specdec.teach.render import UNTESTED_WHY, plural

from . import charts
from .charts import CHAIN, SPECULATIVE, TREE, VERIFIER_ONLY
from .state import (
    FIELD_LABELS,
    TREE_FIELDS,
    CpuShare,
    Loader,
    Replay,
    Session,
    Worker,
    changes,
    form_defaults,
    form_values,
    model_field,
    parse_form,
    parse_models,
)
from .views import (
    REAL_TREE,
    REAL_TREE_BUTTON,
    CompareView,
    Problem,
    Replayed,
    RunView,
    SampleView,
    StepView,
    compare_view,
    field_message,
    run_view,
    shape_text,
    step_view,
)

NOT_READY = "The models are still loading; this works as soon as they are ready."
WAITING = "Waiting for another session's round to finish (the models are shared, one round at a time)..."
REFRESH_S, REFRESH_TOKENS = 1.0, 128
MAX_RUNS = 5
MAX_TRACE_BYTES = 50 * 2**20
SAMPLES = 10_000
STOPPED_COMPARE = ("**Stopped.** The figures below are of the rounds each side ran before the stop: partial runs, "
                   "not a comparison (no speed-up is given). Press **Run both** for a whole one.")
FLAT_TV = 0.01  # below this exact total variation the bug's histogram cannot be told from p's by eye


def _problem(e: Exception, form: dict | None = None) -> Problem:
    field = getattr(e, "field", None)
    p = Problem(str(e), field)
    return Problem(field_message(p, FIELD_LABELS, (form or {}).get(field, 0)), field)


def _settings(loader: Loader, form: dict, session: Session):
    if loader.pair is None:
        return Problem(NOT_READY)
    loader.serve(session)
    try:
        return parse_form(form, loader.pair)
    except ConfigError as e:
        return _problem(e, form)


def _busy(loader: Loader) -> bool:
    pair = loader.pair  # None while the models are being switched
    return pair is not None and pair.lock.locked()


# ---- step through one round -------------------------------------------------------------------

def _same_run(a: RunSettings, b: RunSettings) -> bool:
    """The same run, as far as the form reads it (W and N only with the tree drafter)."""
    def read(s: RunSettings):
        return s.decode if s.drafter == "tree" else replace(s.decode, **{n: form_defaults()[n] for n in TREE_FIELDS})
    return (a.prompt, a.drafter, read(a)) == (b.prompt, b.drafter, read(b))


def _step_source(loader: Loader, session: Session, form: dict, all_k: bool = False):
    """The settings and, when they are new, a fresh source of rounds: the uploaded trace while
    the form still holds its settings (no models needed), else a generation on the models.
    ``all_k``: the live generation drafts all K tokens every round (draft confidence 0)."""
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
    settings = _settings(loader, form, session)
    if isinstance(settings, Problem):
        return settings, None
    if all_k:
        settings = replace(settings, decode=replace(settings.decode, confidence=0.0))
    # a generation holds the pair it began on: after a switch of the models it is not continued
    if not isinstance(session.gen, Generation) or session.gen.pair is not loader.pair or settings != session.settings:
        return settings, start(loader.pair, settings.prompt, settings.decode, settings.drafter)
    return settings, None


def step(loader: Loader, action: str, session: Session, form: dict, all_k: bool = False
         ) -> Iterator[StepView | Problem]:
    """action: draft | verify | accept | commit | step | reset (see :class:`~.state.Walkthrough`).
    ``all_k``: draft all K tokens every round, whatever the form's draft confidence (the page's
    default in this tab, :data:`ALL_K_WHY`), so that each round shows the rule on several drafts."""
    with session.stepping:
        yield from _step(loader, action, session, form, all_k)


def _step(loader: Loader, action: str, session: Session, form: dict, all_k: bool) -> Iterator[StepView | Problem]:
    try:
        settings, fresh = _step_source(loader, session, form, all_k)
    except ConfigError as e:
        yield _problem(e, form)
        return
    if isinstance(settings, Problem):
        yield settings
        return
    notice = ""
    try:
        if action == "reset" and not fresh:
            fresh = Replay(session.replay) if session.replay is not None else start(
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
        # a live round is compared with this machine's cost fit; a replayed one was timed on another machine
        view = partial(step_view, settings=settings, step_fit=loader.step_fit if live else None,
                       shape=_shape(settings, session.gen.cfg if live else settings.decode, session.gen))
        if walk.needs_round(action) and live and _busy(loader):
            yield replace(view(walk, notice=""), status=WAITING)
        new_round = next(session.gen, None) if walk.needs_round(action) else None
    except (ConfigError, NumericalError) as e:
        yield _problem(e, form)
        return
    session.walk, said = walk.press(action, new_round, session.gen.stop_reason)
    source = "" if live else f"Replaying the uploaded trace (no models run), {len(session.gen.trace.rounds)} rounds. "
    yield view(session.walk, notice=source + notice + said)


ALL_K_LABEL = "Draft all K tokens every round (this tab only)"
ALL_K_WHY = ("Here every round drafts all K, so that you see the rule test several drafts; Run and Compare stop a "
             "draft once it is less sure than **Draft confidence** (faster on prose: docs/results.md).")


def _requested(settings: RunSettings) -> bool:
    """Not the tree drafter, or a tree shape the learner set in full: nothing to explain."""
    return settings.drafter != "tree" or bool(settings.decode.tree_width and settings.decode.tree_nodes)


def _shape(settings: RunSettings, ran: DecodeConfig, gen) -> tuple[int, int, str] | None:
    """The tree drafter's (W, N, why) as the run recorded them where this machine chose (a trace records
    the shape only); None where the learner set it, or for the other drafters."""
    if settings.drafter != "tree" or (_requested(settings) and isinstance(gen, Generation)):
        return None
    why = gen.tree_shape if isinstance(gen, Generation) else f"W = {ran.tree_width}, N = {ran.tree_nodes}, as recorded"
    return ran.tree_width, ran.tree_nodes, why


def _sampled_round(session: Session):
    """The round on show when the sampler can run on it (a decided chain round that tested a draft), else None."""
    r = session.walk.shown
    ok = r is not None and session.walk.phase in ("accept", "commit") and r.tested and r.tree is None
    return r if ok else None


def _tested(r) -> dict[int, tuple[float, float]]:
    """Per tested position of a round (1-based): the argmax bug's exact total variation from p, and the noise
    bound of SAMPLES rounds there (docs/notation.md: what sampling noise alone may put between a histogram and p)."""
    return {i + 1: (bug_tv(pos), tv_noise_bound(lumped(pos)[1], SAMPLES)) for i, pos in enumerate(r.positions)
            if pos.tested}


def _beyond(tv: float, bound: float) -> bool:
    """The bug's exact distance from p shows in SAMPLES rounds: past the noise bound, and more than rounding."""
    return tv > bound and tv >= FLAT_TV


def _default_position(tested: dict[int, tuple[float, float]]) -> int:
    """The tested position where the bug's exact total variation most exceeds the noise bound."""
    return max(tested, key=lambda i: tested[i][0] - tested[i][1])


def _bug_cannot_show(settings: RunSettings | None) -> tuple[str, str] | None:
    """Why the argmax bug coincides with the rule at every position of every round these settings run, and
    what to change in the sidebar; None where it can show."""
    if settings is None:
        return None
    sampling = settings.decode.sampling
    if sampling.greedy:
        return "At temperature 0 p and q are one-hot, each all on its argmax", "set a temperature above 0 (0.8, say)"
    if sampling.top_k == 1:
        return "At top-k 1 p and q are one-hot, each all on its argmax", "set top-k above 1 (or 0, off)"
    if settings.drafter == "lookup":
        return ("The prompt-lookup drafter's q is one-hot: it copies the tokens that followed a match in the text",
                "pick the drafter 'draft model'")
    return None


def sample_positions(session: Session) -> tuple[list[tuple[str, int]], int | None]:
    """The picker's choices for the round on show, (label, 1-based position) per tested position, and
    the one Sample takes unless the learner picks another; ([], None) when there is nothing to sample."""
    r = _sampled_round(session)
    if r is None:
        return [], None
    tested = _tested(r)
    default = _default_position(tested)
    choices = []
    for i, (tv, bound) in tested.items():
        where = "beyond" if _beyond(tv, bound) else "within"
        mark = " (farthest beyond the noise)" if i == default and where == "beyond" else ""
        choices.append((f"{i}: {r.positions[i - 1].text!r}, {r.positions[i - 1].status}: the argmax bug's exact TV "
                        f"{tv:.3f}, {where} the noise bound {bound:.3f}{mark}", i))
    return choices, default


def sample_is_stale(session: Session) -> bool:
    """The sampler's result on the page belongs to a round no longer on show."""
    return session.sampled is not None and session.sampled is not _sampled_round(session)


def sample(session: Session, position=None) -> SampleView | Problem:
    """Run the pure rule 10,000 times on one tested position of the round on show: the learner's pick
    (1-based), else the one where the argmax bug lands farthest beyond the noise of 10,000 rounds."""
    if session.walk.shown is not None and session.walk.shown.tree is not None:
        return Problem("This runs the chain's rule on one drafted position; a tree round tests siblings in turn "
                       "against a moving residual instead. Pick the drafter 'draft model' to run it.")
    r = _sampled_round(session)
    if r is None:
        return Problem("Step a round through Accept/reject first (a round that drafted something): the rule is run "
                       "on one of its tested positions.")
    tested = _tested(r)
    listed = ", ".join(map(str, tested))
    if isinstance(position, float) and position.is_integer():
        position = int(position)
    if position is not None and not (isinstance(position, int) and not isinstance(position, bool)):
        return Problem(f"Pick a position of round {r.index + 1} from the list (its tested positions: {listed}); "
                       f"got {position!r}.")
    if position is not None and position not in tested:
        if not 1 <= position <= len(r.positions):
            drafted = plural(len(r.positions), "token", "tokens")
            return Problem(f"Round {r.index + 1} has no position {position}: it drafted {drafted}. Pick one of its "
                           f"tested positions: {listed}.")
        pos = r.positions[position - 1]
        return Problem(f"Position {position} ({pos.text!r}) decided nothing ({UNTESTED_WHY[pos.status]}), so there "
                       f"is no rule to run there. Pick one of the round's tested positions: {listed}.")
    same = _bug_cannot_show(session.settings)
    default = _default_position(tested)
    i = default if position is None else position
    tv, bound = tested[i]
    pos = r.positions[i - 1]
    h = histogram(pos, SAMPLES)
    decided = ", the position that decided the round" if r.rejected_at == i - 1 else ""
    spot = f"position {i} (drafted {pos.text!r}, {pos.status}{decided})"
    where = f"Round {r.index + 1}, {spot}"
    exact = f"exactly {tv:.3f} from p in total variation, against a noise bound of {bound:.3f} for {SAMPLES:,} rounds"
    if same:
        head = (f"{where}. **{same[0]}**, so the argmax draft *is* the sample of q: the bug and the rule coincide "
                "exactly, at every position of every round, and no round with these settings can show a difference.")
    elif position is not None and position != default:
        head = (f"{where}, as picked: the argmax bug lands {exact}, "
                + ("beyond it." if _beyond(tv, bound) else "within it (the list marks the positions beyond it)."))
    elif _beyond(tv, bound):
        head = f"{where}: of the round's tested positions, the one where the argmax bug lands farthest beyond the " \
               f"noise: {exact}."
    else:
        head = (f"**At no tested position of round {r.index + 1} does the argmax bug land off p by more than sampling "
                f"noise can.** Shown: {spot}, the closest: {exact}.")
    lines = [f"{head} The rule ran {SAMPLES:,} times on this position's p and q (their top tokens; all other tokens "
             "lumped into one), each time drafting from q, testing u ≤ p/q and drawing from the residual on a "
             "rejection.",
             f"* **The rule:** total variation from p = **{h.tv_correct:.3f}**: the emitted tokens follow p, up to "
             f"sampling noise (at most {h.noise_bound:.3f} here, the bound of docs/notation.md).",
             f"* **The bug** (the draft takes q's argmax but reports softmax q): total variation = **{h.tv_bug:.3f}**."]
    if same:  # a paragraph of its own, not a continuation of the list above
        lines.append(f"\nTo see the bug land off p, {same[1]} in the sidebar and step a round, or load a position "
                     "into the **Rule** tab and try its presets.")
    elif not _beyond(tv, bound):
        title = "Why no difference here" if tv < FLAT_TV else f"Why the difference is small here ({tv:.3f})"
        lines.append(f"\n**{title}:** the bug always drafts q's top token x*. Where q is (nearly) "
                     "one-hot, that argmax *is* a sample of q; where p is (nearly) one-hot on x*, the rule keeps x* "
                     "every time, just as p would emit it. Either way the bug emits what p emits. It shows where q is "
                     "spread out and p is not sure of x*: p ≈ q is not enough (with p = q = (0.5, 0.5) the bug emits "
                     "x* every time, 0.5 away from p). To see it: "
                     + ("pick a position the list marks beyond the noise." if any(_beyond(*t) for t in tested.values())
                        else "step another round, let p and q spread out (a higher temperature, a larger top-k or "
                             "top-p in the sidebar), or load a position into the **Rule** tab and try its presets."))
    session.sampled = r
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
    settings = _settings(loader, form, session)
    if isinstance(settings, Problem):
        yield settings
        return
    try:
        gen = start(loader.pair, settings.prompt, settings.decode, settings.drafter)
    except ConfigError as e:
        yield _problem(e, form)
        return
    session.stop, session.running = False, [gen]
    shape = "" if _requested(settings) else _run_shape(gen)
    yield _live(gen, ("Waiting for another session's round..." if _busy(loader) else
                      "Reading the prompt (the prefill)...") + shape)
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
    yield _live(gen, ended + shape, _write_trace(trace.to_json()), others=cpu.others())


def _run_shape(gen: Generation) -> str:
    """The shape the tree drafter chose and why, for the Run tab's status."""
    w, n = gen.cfg.tree_width, gen.cfg.tree_nodes
    offer = (f" To see a real tree, press **{REAL_TREE_BUTTON}** in the Step through tab: it sets Tree width W = "
             f"{REAL_TREE[0]}, Tree nodes N = {REAL_TREE[1]} and draft confidence {REAL_TREE[2]:g} in the sidebar." if w == 1
             else "")
    return " " + shape_text(w, n, gen.tree_shape) + offer


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
    session.restart(settings, Replay(trace))  # the step-through switches to it now, not at the next press
    s = trace.settings
    where = ", ".join(f"{k} {s[k]}" for k in ("target", "device", "precision") if s.get(k))
    view = run_view(list(trace.rounds), trace.prefill_s,
                    f"Replayed a trace of {len(trace.rounds)} rounds ({where}); prompt: {s.get('prompt')!r}. Its "
                    "settings are in the sidebar; the Step through tab steps through it round by round.")
    return Replayed(view, form_values(settings))


def replayed_step(session: Session, path: str | None) -> StepView | None:
    """The Step through tab once ``path`` is replayed: the trace, none of its rounds stepped yet; None (the tab
    left as it is) when the upload was refused or the tab steps something else."""
    gen, walk = session.gen, session.walk
    if not path or not isinstance(gen, Replay) or gen.trace is not session.replay or walk.shown is not None:
        return None
    settings = session.settings
    status = (f"Replaying {os.path.basename(path)}: {plural(len(gen.trace.rounds), 'round', 'rounds')} of the "
              "uploaded trace, no models run, its settings in the sidebar. Press **Draft** or **Step round** to "
              "step through it.")
    return step_view(walk, settings, status, shape=_shape(settings, settings.decode, gen))


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
    explained (:func:`specdec.teach.exactness.explain`: a near-tie or a bug)."""
    from specdec.teach.exactness import explain
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
    settings = _settings(loader, form, session)
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
            pairs.append({name: start(loader.pair, settings.prompt, cfg, drafter)
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
    yield replace(final, badge=STOPPED_COMPARE) if stopped else final


# ---- the model pair ---------------------------------------------------------------------------

SAME_MODELS = "These are the models in use: change a field first, or press Run or a step button to use them."
ALREADY_LOADING = "A pair is loading already (pressed in another session?): wait for it, then try again."
SETTLED_POLL_S = 0.25


def load_models(loader: Loader, values: dict) -> Iterator[str | Problem]:
    """Switch every session to the header's model pair (the command line's --target, --draft, ...).
    A status line once it loads, then "" once it is in use; or a Problem at the field whose value
    the loader refused, with the loader's own message, as soon as it is refused (the pair in use
    before then loads again)."""
    models = parse_models(values)
    if loader.pair is not None and models == loader.models:
        yield Problem(SAME_MODELS)
        return
    if not loader.switch(models):
        yield Problem(ALREADY_LOADING)
        return
    if loader.refused is None:
        yield (f"Loading {models.target}" + (f" with {models.draft}" if models.draft else ", no draft model")
               + "; every session's step-through will restart on it.")
    while loader.loading and loader.refused is None:
        loader.wait(SETTLED_POLL_S)
    if loader.refused is None:
        yield ""
        return
    field = model_field(loader.refused)
    yield Problem(field_message(Problem(str(loader.refused), field), FIELD_LABELS, values.get(field)), field)
