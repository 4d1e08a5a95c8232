"""The Run tab: one whole generation, its text colour-coded as it grows, then every number with its
definition, the charts, and its trace to download; or a downloaded trace replayed, no models needed.

A run goes on in a :class:`~specdec_ui.state.Worker` thread at the engine's own pace; the handler only
looks at the rounds it has produced so far (:func:`specdec_ui.views.follow`). While it goes the page
gets the text and live charts drawn in plain HTML; the interactive plotly charts come once, at the
end: a plotly redraw costs the browser so much CPU that, redrawn every few seconds, it slowed the
engine on a 2-core machine (``benchmarks/app_overhead.py``).
"""
from __future__ import annotations

import os
import statistics
import tempfile
import uuid
from dataclasses import dataclass, replace
from typing import Any, Iterator

import gradio as gr

from specdec import ConfigError, Generation, RunSettings, TraceFile
from specdec.decode.start import start
from specdec.teach.render import draft_depth, output_text, plural, round_stats, segments
from specdec.teach.theory import decode_tokens_per_s
from specdec.trace import RoundTrace, RunSummary, summarize
from specdec_ui import charts
from specdec_ui.kinds import kinds_chart, kinds_markdown
from specdec_ui.markup import plain_html, token_html
from specdec_ui.threshold import STEP, TOP, ConfidenceRun, confidence_view
from specdec_ui.state import (
    FIELD_LABELS,
    FORM,
    CpuShare,
    Loader,
    Replay,
    Session,
    Worker,
    form_values,
)
from specdec_ui.tree_views import REAL_TREE, REAL_TREE_BUTTON, requested, shape_text
from specdec_ui.views import (
    Problem,
    Replayed,
    UNCHANGED,
    WAITING,
    adaptive_note,
    busy,
    follow,
    problem,
    read_settings,
    stop,
)
from specdec_ui.wiring import (
    PLOT_MIN_WIDTH,
    SHOW_FIELD_ERROR,
    Page,
    text_views,
    view_outputs,
)

MAX_TRACE_BYTES = 50 * 2**20
VARIES = ("A time is one measurement: the same run can vary by tens of percent from run to run, more on a busy "
          "machine. The Compare tab repeats runs and shows the spread.")


@dataclass(frozen=True, kw_only=True)
class RunView:
    status: str
    text: str
    live: str             # HTML: the live charts while the run goes; "" once the interactive ones are drawn
    plain: str
    stats: str
    ratio: Any
    timing: Any
    acceptance: Any
    tokens: Any
    kinds: Any            # a = kept / tested per kind of token
    kinds_text: str       # what that chart shows, from its numbers
    confidence_box: Any   # the confidence section shown (bool): the run has chains the draft model drew
    threshold: Any        # the threshold slider: from the run's own threshold up, at it
    confidence: Any       # each tested draft's confidence against its verdict
    replayed: Any         # the run replayed at each threshold
    threshold_text: str   # the numbers at the slider's threshold
    download: str | None  # path of the trace file once the run has ended


# ---- the view ------------------------------------------------------------------------------------

def run_view(rounds: list[RoundTrace], prefill_s: float, status: str, download: str | None = None,
             waited_s: float = 0.0, final: bool = True, others: float | None = None,
             confident: ConfidenceRun | None = None) -> RunView:
    """The run so far. While it goes (``final`` False) the page gets the status, the coloured text
    and the two live charts in HTML, and keeps the rest it shows; at the end, everything, with the
    interactive charts. ``waited_s``: the time the run waited for other sessions' rounds
    (:attr:`~specdec_ui.state.Worker.waited_s`); ``others``: the share of the machine's cores other
    processes used while the run went (:class:`~specdec_ui.state.CpuShare`), said with the speed it costs;
    ``confident``: the run for the confidence section (:mod:`specdec_ui.threshold`), None to hide it."""
    segs = segments(rounds)
    conf = confidence_view(confident) if final and confident is not None else None
    some, drafted = bool(rounds), any(r.positions for r in rounds)

    def last(make, needed: bool):
        return (make() if needed else None) if final else UNCHANGED
    return RunView(status=status, text=token_html(segs, detail=final), live="" if final else charts.live_html(rounds),
                   plain=last(lambda: plain_html(output_text(segs)), True),
                   stats=last(lambda: summary_markdown(summarize(rounds, prefill_s), rounds, waited_s, others), some) or "",
                   ratio=last(lambda: charts.ratio_figure(rounds), drafted),
                   timing=last(lambda: charts.timing_figure(rounds), some),
                   acceptance=last(lambda: charts.acceptance_figure(rounds), drafted),
                   tokens=last(lambda: charts.tokens_per_round_figure(rounds), drafted),
                   kinds=last(lambda: kinds_chart({"this run": [rounds]}), drafted),
                   kinds_text=last(lambda: kinds_markdown({"this run": [rounds]}), drafted) or "",
                   confidence_box=conf is not None if final else UNCHANGED,
                   threshold=gr.update(value=confident.own) if conf else UNCHANGED,
                   confidence=conf[0] if conf else last(lambda: None, False),
                   replayed=conf[1] if conf else last(lambda: None, False),
                   threshold_text=conf[2] if conf else ("" if final else UNCHANGED), download=download)


def round_spread(rounds: list[RoundTrace]) -> str:
    """The middle half of the rounds' times, as a measure of how much one measurement moves."""
    ms = sorted(1e3 * r.times.total for r in rounds)
    if len(ms) < 4:
        return ""
    q = statistics.quantiles(ms, n=4)
    return f"; rounds took {q[0]:.0f}–{q[2]:.0f} ms (the middle half), median {q[1]:.0f} ms"


def _why_fewer(rounds: list[RoundTrace]) -> str:
    """Why rounds drafted fewer than K: Adaptive K's choices (its plain steps counted, and whether it
    ever chose a tree where it could), or the draft's own stops."""
    paced = [r for r in rounds if r.plan is not None]
    if not paced:
        return "a draft stops early below the draft confidence, at a stop token or where the budget ends"
    plain = sum(r.plan.asked == 0 for r in paced)
    weighed_trees = any(r.plan.trees for r in paced)
    tree_note = ("; it weighed trees each round and chose a chain every time: on this machine no tree was "
                 "predicted to pay" if weighed_trees and not any(r.tree is not None for r in rounds) else "")
    return (f"each round's K chosen by Adaptive K, {plural(plain, 'round', 'rounds')} of {len(paced)} a plain "
            f"verifier step (K = 0){tree_note}")


def summary_markdown(s: RunSummary, rounds: list[RoundTrace], waited_s: float = 0.0,
                     others: float | None = None) -> str:
    """Every number with its definition, where it is shown."""
    decode = s.wall_s - s.prefill_s
    waited = f"; {waited_s:.1f} s waiting for other sessions' rounds excluded" if waited_s >= 0.05 else ""
    lines = [f"**{decode_tokens_per_s(rounds):.2f} tok/s** decoding = {s.new_tokens} tokens / {decode:.2f} s of this "
             f"session's compute for the rounds{round_spread(rounds)}{waited}",
             f"**{s.tokens_per_s:.2f} tok/s** overall = {s.new_tokens} tokens / {s.wall_s:.2f} s, the prefill (reading "
             f"the prompt, {s.prefill_s:.2f} s) included",
             f"**{s.rounds} rounds**, **{s.target_forwards} verifier passes** = one per round + one over the prompt "
             "(the prefill)"]
    trees = [r.tree for r in rounds if r.tree is not None]
    if s.drafted and trees:
        tested = sum(r.tested for r in rounds)
        depth = sum(draft_depth(r) for r in rounds) / s.rounds
        shape = (f"W = {trees[-1].width} children per expanded node at most, N = {trees[-1].budget} nodes at most"
                 if all(r.plan is None for r in rounds) else
                 f"{len(trees)} of the {s.rounds} rounds a tree, each round's shape chosen by Adaptive K")
        lines += [f"**a = {s.accepted / tested if tested else 0:.2f}** = steps down the tree kept / tried = "
                  f"{s.accepted} / {tested} (one try per depth the walk reaches, a success when one of the node's "
                  "children is kept; this is the a of the theory curve)",
                  _tokens_per_round(s, rounds, "path nodes kept"),
                  f"**{s.drafted / s.rounds:.2f} nodes drafted per round** on average, at most one path of them "
                  f"kept, **{depth:.2f} deep** ({shape}, K = the most depth; the theory curve uses each tree's depth)"]
    elif s.drafted:
        stats = round_stats(rounds)
        tested = sum(r.tested for r in rounds)
        lines += [f"**a = {stats.running_a[-1]:.2f}** = drafts kept / tested = {s.accepted} / {tested} (a draft after "
                  "a rejection is never tested; this is the a of the theory curve)",
                  _tokens_per_round(s, rounds, "drafts kept"),
                  f"**{s.drafted / s.rounds:.2f} drafted per round** on average (" + _why_fewer(rounds) +
                  "; the theory curve uses these lengths)"]
    if others is not None:
        lines.append(f"**other processes used {others:.0%} of this machine's {os.cpu_count() or 1} cores** while it "
                     "ran: this page in your browser among them (drawing the text as it grows), and anything else "
                     "running. The engine's threads share the cores with them, so its rounds run slower than "
                     "`python -m specdec generate` in a terminal, which has the cores to itself "
                     "(`benchmarks/app_overhead.py` measures the difference)")
    return "\n".join(f"* {line}" for line in lines) + f"\n\n*{VARIES}*"


def _tokens_per_round(s: RunSummary, rounds: list[RoundTrace], kept: str) -> str:
    """Tokens per round with what they are: the kept drafts, and the token the verifier drew to end each
    round, except a round that ended at a stop token among its kept drafts, which draws none."""
    stopped = sum(r.next_kind is None for r in rounds)
    drawn = f"{s.rounds - stopped} drawn by the verifier (the resampled or bonus token: one per round"
    drawn += (f", none in the {plural(stopped, 'round', 'rounds')} that ended at a stop token among the kept drafts)"
              if stopped else ")")
    return (f"**{s.mean_tokens_per_round:.2f} tokens per round** = {s.new_tokens} tokens / {s.rounds} rounds; "
            f"{s.new_tokens} = {s.accepted} {kept} + {drawn}")


# ---- the buttons -------------------------------------------------------------------------------

def run(loader: Loader, session: Session, form: dict) -> Iterator[RunView | Problem]:
    """Views of one generation as it goes; Stop ends it cleanly, also in the middle of a long prefill."""
    settings = read_settings(loader, form, session)
    if isinstance(settings, Problem):
        yield settings
        return
    try:
        gen = start(loader.pair, settings.prompt, settings.decode, settings.drafter)
    except ConfigError as e:
        yield problem(e, form)
        return
    session.stop, session.running = False, [gen]
    shape = ("" if requested(settings) else _run_shape(gen)) + adaptive_note(settings)
    yield _live(gen, ("Waiting for another session's round..." if busy(loader) else
                      "Reading the prompt (the prefill)...") + shape)
    cpu = CpuShare()
    worker = Worker([[gen]])

    def view(waiting: bool) -> RunView:
        rounds = list(gen.rounds)
        status = WAITING if waiting else f"Round {len(rounds)}: {sum(len(r.emitted) for r in rounds)} tokens..."
        return _live(gen, status, rounds=rounds, final=False, waited_s=worker.waited_s)
    yield from follow(worker, view, [gen])
    session.running = []
    if worker.error is not None:
        yield problem(worker.error)
        return
    ended = (f"Finished ({gen.stop_reason})." if gen.stop_reason not in (None, "cancelled") else
             f"Stopped after {plural(len(gen.rounds), 'round', 'rounds')}.")
    ran = replace(settings, decode=gen.cfg)  # the tree shape that ran, not 0 for "this machine's choice"
    trace = TraceFile(ran.to_dict(), tuple(gen.rounds), gen.prefill_s, gen.text, gen.stop_reason)
    session.confident = confident_run(loader, gen.rounds, settings.decode.confidence)
    yield _live(gen, ended + shape, _write_trace(trace.to_json()), waited_s=worker.waited_s, others=cpu.others(),
                confident=session.confident)


def confident_run(loader: Loader, rounds, own: float) -> ConfidenceRun:
    """The run for the confidence section, with this machine's cost of a verification row once timed."""
    return ConfidenceRun(tuple(rounds), own, loader.step_fit[1] if loader.step_fit else 0.0)


def threshold_moved(session: Session, tau: float) -> tuple:
    """The confidence section at the slider's threshold (the session's last run or replayed trace)."""
    conf = confidence_view(session.confident, tau) if session.confident is not None else None
    return conf if conf is not None else (gr.skip(), gr.skip(), gr.skip())


def _run_shape(gen: Generation) -> str:
    """The shape the tree drafter chose and why, for the status."""
    w, n = gen.cfg.tree_width, gen.cfg.tree_nodes
    offer = (f" To see a real tree, press **{REAL_TREE_BUTTON}** in the Step through tab: it sets Tree width W = "
             f"{REAL_TREE[0]}, Tree nodes N = {REAL_TREE[1]} and draft confidence {REAL_TREE[2]:g} in the sidebar." if w == 1
             else "")
    return " " + shape_text(w, n, gen.tree_shape) + offer


def _live(gen: Generation, status: str, download: str | None = None, rounds=None, final: bool = True,
          waited_s: float = 0.0, others: float | None = None, confident: ConfidenceRun | None = None) -> RunView:
    return run_view(list(gen.rounds) if rounds is None else rounds, gen.prefill_s, status, download, waited_s,
                    final, others, confident)


def replay(session: Session, path: str | None, loader: Loader | None = None) -> Replayed | Problem | None:
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
    session.confident = ConfidenceRun(trace.rounds, settings.decode.confidence,
                                      loader.step_fit[1] if loader is not None and loader.step_fit else 0.0)
    view = run_view(list(trace.rounds), trace.prefill_s,
                    f"Replayed a trace of {len(trace.rounds)} rounds ({where}); prompt: {s.get('prompt')!r}. Its "
                    "settings are in the sidebar; the Step through tab steps through it round by round.",
                    confident=session.confident)
    return Replayed(view, form_values(settings))


def _write_trace(text: str) -> str:
    """A file for the download button (gradio serves a copy from its own cache)."""
    folder = os.path.join(tempfile.gettempdir(), "specdec-traces")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"specdec-trace-{uuid.uuid4().hex[:12]}.json")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


# ---- the tab ----------------------------------------------------------------------------------

def build(page: Page, tab_id: str) -> None:
    """The tab, inside ``gr.Tabs``; its upload box replays a trace here and in every tab that follows uploads."""
    loader, session, form = page.loader, page.session, page.form
    with gr.Tab("Run", id=tab_id):
        about = gr.State(None)
        with gr.Row():
            run_b = gr.Button("Run", variant="primary", min_width=90)
            stop_b = gr.Button("Stop run", variant="stop", min_width=90)
            download = gr.DownloadButton("Download trace (JSON)", interactive=False, min_width=90)
        view = {"status": gr.Markdown("Press **Run** to generate, round by round."), "download": download}
        alert = gr.Markdown(elem_classes=["spec-alert"])
        view["text"], view["plain"] = text_views("run")
        view["live"] = gr.HTML()
        view["stats"] = gr.Markdown()
        with gr.Row():
            view["timing"] = gr.Plot(visible=False, show_label=False, min_width=PLOT_MIN_WIDTH)
            view["ratio"] = gr.Plot(visible=False, show_label=False, min_width=PLOT_MIN_WIDTH)
        with gr.Row():
            view["acceptance"] = gr.Plot(visible=False, show_label=False, min_width=PLOT_MIN_WIDTH)
            view["tokens"] = gr.Plot(visible=False, show_label=False, min_width=PLOT_MIN_WIDTH)
        view["kinds"] = gr.Plot(visible=False, show_label=False)
        view["kinds_text"] = gr.Markdown()
        with gr.Column(visible=False) as view["confidence_box"]:
            gr.Markdown("### The draft's confidence against acceptance\n"
                        "A model draft stops early after a token it is less sure of than the draft confidence "
                        "(its top probability below the threshold τ). Move τ to replay this run's rounds as if "
                        "it had drafted at τ.")
            view["threshold"] = gr.Slider(0.0, TOP, value=0.6, step=STEP, label="Confidence threshold τ (replayed)",
                                          buttons=[])
            with gr.Row():
                view["confidence"] = gr.Plot(visible=False, show_label=False, min_width=PLOT_MIN_WIDTH)
                view["replayed"] = gr.Plot(visible=False, show_label=False, min_width=PLOT_MIN_WIDTH)
            view["threshold_text"] = gr.Markdown()
        # any file type: the handler says what is wrong with one that is not a trace
        upload = gr.File(label=FIELD_LABELS["upload"] + " (no models needed)", height=110)
        upload_message = gr.Markdown()
    outputs, show = view_outputs(RunView, view, form, alert, page.sidebar, upload_message, loader, about)

    def listener(session_, *values):
        for i, result in enumerate(run(loader, session_, dict(zip(FORM, values)))):
            yield show(result, first=i == 0)
    run_b.click(listener, [session, *form.values()], outputs, show_progress="hidden").then(
        None, None, None, js=SHOW_FIELD_ERROR)
    stop_b.click(stop, session, view["status"])
    for event in (view["threshold"].input, view["threshold"].release):  # dragged, typed, or keys
        event(threshold_moved, [session, view["threshold"]], [view["confidence"], view["replayed"],
              view["threshold_text"]], show_progress="hidden", trigger_mode="always_last")
    replayed = upload.upload(lambda s, path: show(replay(s, path, loader)), [session, upload], outputs)
    page.uploads.append((replayed, upload))
    page.needs_models.append(run_b)
