"""The Race tab: one prompt, one verifier, every drafter, the sidebar's settings, one after another
(:mod:`specdec.teach.race`). A row per drafter with the race's numbers, each defined beside the table in
the race module's words; a chart of the speed-ups and tokens per round; each output coloured by who
proposed each kept token.

The drafters run one at a time, each driven by a :class:`~specdec_ui.state.Worker` a round at a time
under the models' lock, as every run of the app is; Stop ends the run in progress before its next round,
and the race there: the rows are the drafters that finished.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from html import escape
from typing import Any, Iterator

import gradio as gr
import torch

from specdec import ConfigError
from specdec.decode.pacing import RoundCosts
from specdec.decode.tree import require_lean
from specdec.decode.tree_shape import machine_costs
from specdec.decode.registry import DRAFTERS, MODEL, VERIFIER_ONLY
from specdec.teach.race import DEFINITIONS, RACERS, VERIFIER, RaceRow, heats, row
from specdec.teach.whatif import (
    MACHINES,
    MIN_TESTED,
    STUDY_A,
    STUDY_DRAFT,
    STUDY_SPEEDUP,
    STUDY_VERIFIER,
    ModelSize,
    agreement,
    per_position,
    model_size,
    predict,
    predict_here,
    predict_row_here,
)
from specdec.trace import DraftedBy
from specdec_ui import charts
from specdec_ui.markup import whitespace_html
from specdec_ui.state import FORM, CpuShare, Loader, Session, Worker
from specdec_ui.views import WAITING, Problem, follow, problem, read_settings, stop
from specdec_ui.wiring import SHOW_FIELD_ERROR, Page, view_outputs

INTRO = ("**One prompt, one verifier, every drafter**, one after another, each with the sidebar's settings (prompt, "
         "K, temperature, max new tokens, seed...; the sidebar's drafter is the one setting not used): first "
         "verifier-only decoding, the baseline, then each drafter against it. At T > 0 every run generates exactly "
         "max-new-tokens tokens (a stop token does not end one early): equal work, so that the speeds compare.")
# Who proposed a kept token: (words, fill, underline). Hues the page's key of verdicts (green kept, red
# rejected, amber resampled, blue bonus) does not use, lightened so that the ink reads on each at 7:1 or
# more, and a second cue, the underline, so that colour is never the only one.
PROPOSERS = {str(DraftedBy.MODEL): ("the draft model", "#ddd6fe", "3px solid #6d28d9"),
             str(DraftedBy.LOOKUP): ("prompt lookup", "#fed7aa", "3px dashed #c2410c"),
             str(DraftedBy.SUFFIX): ("the suffix tree", "#a5f3fc", "3px double #0e7490"),
             str(DraftedBy.SELF): ("the verifier, layers skipped", "#fbcfe8", "3px dotted #be185d"),
             VERIFIER: ("the verifier (a resample, a bonus, a plain step)", "#e5e7eb", "none")}
TRY = ("**Try:** press the button again on the same prompt: the suffix tree's pool now holds the first race's "
       "output, which is what a second run of the same task gains (during a race the pool is held still: no "
       "drafter reads another's output of the same prompt, so the first race cannot show it). Then the last "
       "example prompt, an edit of code in the prompt (rename a variable and return the full code): the drafters "
       "that copy (prompt lookup, the suffix tree) cost almost nothing a draft (c about 0), and win where the "
       "copied stretches are long; on fresh prose nothing earlier matches, and none of them should.")
BUSY_SHARE = 0.15  # other processes' share of the cores above which the speeds are said to be unreliable
STOPPED = "**Stopped.** The rows are the drafters that finished before the stop; the others did not run."


@dataclass(frozen=True, kw_only=True)
class RaceView:
    badge: str     # the race's progress, or how it ended
    table: str     # HTML: a row per drafter that finished, and the drafters not run, with why
    chart: Any     # speed-up and tokens per round per drafter; None until the race ends
    outputs: str   # HTML: each drafter's output coloured by who proposed each kept token
    whatif: str        # HTML: the what-if table and this machine's predictions against the race
    whatif_chart: Any  # S(K) predicted on other machines from this race's acceptance; None until it ends
    whatif_notes: str  # why the M2 Max gained nothing, what each number is, the machines' sources


# ---- the view ------------------------------------------------------------------------------------

def _badge(r: RaceRow) -> str:
    if r.drafter == VERIFIER_ONLY.name:
        return '<span class="race-badge">the baseline</span>'
    if r.identical is None:
        return '<span class="race-badge cmp-by-design">sampled: not compared</span>'
    if r.identical:
        return '<span class="race-badge cmp-identical">✓ yes</span>'
    return '<span class="race-badge cmp-differ">✗ NO</span>'


def table_html(rows: list[RaceRow], skipped: list[str]) -> str:
    """The rows, verifier-only first, then the drafters not run and why, then every column's definition."""
    if not rows:
        return ""
    head = ("drafter", "tokens", "rounds", "tokens / round", "a = kept / tested", "c", "decode tok/s", "speed-up",
            "identical")
    body = "".join(
        f"<tr><th scope=\"row\">{escape(r.label)}</th><td>{r.tokens}</td><td>{r.rounds}</td>"
        f"<td>{r.tokens_per_round:.2f}</td><td>{'–' if r.acceptance is None else f'{r.acceptance:.0%}'}</td>"
        f"<td>{'–' if r.c is None else f'{r.c:.2f}'}</td><td>{r.decode_tok_s:.2f}</td><td>{r.speedup:.2f}x</td>"
        f"<td>{_badge(r)}</td></tr>" for r in rows)
    table = ('<div class="race-scroll" tabindex="0" role="region" aria-label="the race table (scrolls sideways)">'
             '<table class="race-table"><thead><tr>' + "".join(f'<th scope="col">{escape(h)}</th>' for h in head)
             + f"</tr></thead><tbody>{body}</tbody></table></div>")
    not_run = "".join(f"<li>{escape(s)}</li>" for s in skipped)
    words = "".join(f"<li><b>{escape(name)}</b>: {escape(text)}</li>" for name, text in DEFINITIONS.items())
    return (table + (f'<p class="race-note">Not run:</p><ul class="race-note">{not_run}</ul>' if skipped else "")
            + f'<ul class="race-note">{words}</ul>')


def legend_html() -> str:
    """One chip per proposer, in the colours and underlines of the outputs."""
    chips = "".join(f'<span class="race-by" style="background:{fill};border-bottom:{line}">{escape(words)}</span> '
                    for words, fill, line in PROPOSERS.values())
    return f'<div class="spec-legend" role="note" aria-label="who proposed each token">Proposed by: {chips}</div>'


def pieces_html(pieces: tuple) -> str:
    """The output as a run of spans, one per stretch of tokens with one proposer, whitespace kept."""
    out, i = [], 0
    while i < len(pieces):
        who = pieces[i][1]
        j = i
        while j < len(pieces) and pieces[j][1] == who:
            j += 1
        words, fill, line = PROPOSERS[who]
        text = "".join(p for p, _ in pieces[i:j])
        out.append(f'<span class="race-by race-by-{who}" style="background:{fill};border-bottom:{line}" '
                   f'title="{escape(f"proposed by {words}", quote=True)}">{whitespace_html(text)}</span>')
        i = j
    return '<div class="spec-tokens">' + "".join(out) + "</div>"


def outputs_html(rows: list[RaceRow]) -> str:
    """Each drafter's output under its name and its kept tokens by proposer, after the legend."""
    if not rows:
        return ""
    parts = [legend_html()]
    for r in rows:
        counts = ", ".join(f"{PROPOSERS[who][0].split(' (')[0]} {n}" for who, n in r.kept_by.items())
        parts.append(f'<p class="race-out-title"><b>{escape(r.label)}</b>: {escape(counts)}</p>'
                     + pieces_html(r.pieces))
    return "".join(parts)


def race_view(rows: list[RaceRow], skipped: list[str], badge: str, final: bool, k: int = 0,
              costs: RoundCosts | None = None, sizes: tuple[ModelSize, ModelSize] | None = None,
              busy: bool = False) -> RaceView:
    """The race so far; at the end (``final``) with its chart and, where the draft model ran and the
    pair's sizes are known, the what-if for other hardware at the race's ``k`` (``costs``: this
    machine's timed costs, None where they are not timed)."""
    model = next((r for r in rows if r.drafter == MODEL.name), None)
    what = whatif(rows, model, k, costs, sizes, busy) if final and model is not None and sizes is not None else None
    return RaceView(badge=badge, table=table_html(rows, skipped),
                    chart=charts.drafters_figure(rows) if final and rows else None, outputs=outputs_html(rows),
                    whatif=what[0] if what else "", whatif_chart=what[1] if what else None,
                    whatif_notes=what[2] if what else "")


# ---- what if it ran elsewhere ---------------------------------------------------------------------

WHATIF_K = range(1, 9)
HERE = "this machine (its timed forwards)"


def whatif(rows: list[RaceRow], model: RaceRow, k: int, costs: RoundCosts | None,
           sizes: tuple[ModelSize, ModelSize], busy: bool = False):
    """(table HTML, chart, notes markdown): S(K) on each machine of :data:`~specdec.teach.whatif.MACHINES`
    (and this one from its timed costs) from the draft model's per-position acceptance in this race, and
    this machine's prediction for each run it can predict against what the race measured."""
    verifier, draft = sizes
    a = per_position(tuple(model.per_position))
    curves = [(m.name, [predict(m, verifier, draft, a, kk) for kk in WHATIF_K]) for m in MACHINES]
    if costs is not None:
        curves.insert(0, (HERE, [predict_here(costs, a, kk) for kk in WHATIF_K]))
    fig = charts.whatif_figure(curves, (model.drafted_per_round, model.speedup))
    at = {name: preds[min(k, len(preds)) - 1] for name, preds in curves}
    head = ("machine", "a verifier step t_v(1)", "c", f"v({k})", f"E({k}) tokens a round", f"S({k})",
            "the best K: S")
    body = "".join(
        f'<tr><th scope="row">{escape(name)}</th><td>{p.step_ms:.1f} ms</td><td>{p.c:.2f}</td><td>{p.v:.2f}</td>'
        f"<td>{p.tokens:.2f}</td><td><b>{p.speedup:.2f}x</b></td>"
        f"<td>{(b := max(preds, key=lambda x: x.speedup)).k}: {b.speedup:.2f}x</td></tr>"
        for name, preds in curves for p in [at[name]])
    table = ('<div class="race-scroll" tabindex="0" role="region" aria-label="the what-if table (scrolls sideways)">'
             '<table class="race-table"><thead><tr>' + "".join(f'<th scope="col">{escape(h)}</th>' for h in head)
             + f"</tr></thead><tbody>{body}</tbody></table></div>")
    lines = []
    if costs is not None:
        for r in rows:
            guess = predict_row_here(costs, r.drafter, r.drafted_per_round, r.tokens_per_round) if r.rounds else None
            if guess is not None:
                lines.append(f"<li><b>{escape(r.label)}</b>: predicted <b>{guess:.2f}x</b> for its "
                             f"{r.drafted_per_round:.2f} drafted and {r.tokens_per_round:.2f} tokens a round; measured "
                             f"<b>{r.speedup:.2f}x</b>: {agreement(guess, r.speedup)}</li>")
    load = (" <b>Other processes were busy while the race ran</b>: its measured speed-ups are unreliable, and so is "
            "this comparison (the timed costs are a quiet machine's)." if busy else "")
    here = ("<p><b>This machine, predicted against the race.</b> From its timed forwards (a verifier forward over L "
            "rows, one draft forward, a round's work besides them: timed once, at a short context, on a quiet "
            "machine) and each run's own drafted and tokens per round. The table's row is another question: a "
            "constant K every round, from the acceptance per position; the chart's star is the race's run, which "
            f"drafted {model.drafted_per_round:.2f} a round on average.{load}</p><ul>{''.join(lines)}</ul>" if lines else
            "<p><b>This machine</b> is not predicted: its forwards are not timed for these models.</p>")
    mps = at[MACHINES[0].name]
    study = predict(MACHINES[0], STUDY_VERIFIER, STUDY_DRAFT, (STUDY_A,), k)
    why = (f"**Would this pair pay on an Apple M2 Max?** The study this project grew from ran PyTorch on an M2 Max "
           f"(MPS) and measured {STUDY_SPEEDUP:.2f}x. There reading the weights is cheap (400 GB/s: "
           f"{verifier.nbytes / 4e8:.1f} ms for this verifier's {verifier.nbytes / 1e9:.2f} GB, {draft.nbytes / 4e8:.1f} "
           "ms for the draft's) and what every layer of a forward costs besides its arithmetic is not (the study "
           "measured about 25 ms fixed a forward of 24 layers); this pair's models have about as many layers "
           f"({draft.layers} and {verifier.layers}), so c rises from the ratio of their bytes "
           f"({draft.nbytes / verifier.nbytes:.2f}) towards the ratio of their layers "
           f"({draft.layers / verifier.layers:.2f}): {mps.c:.2f}, and S({k}) = {mps.speedup:.2f}x. A drafted token "
           "costs most of a verifier step, and a round of K drafts costs more than the steps it saves unless nearly "
           "every draft is kept. The study's own pair (DistilGPT-2, 6 layers, drafting for GPT-2 Medium, 24) had "
           f"the cheap draft this pair lacks there: c = {study.c:.2f}; at its measured acceptance {STUDY_A:.2f} "
           f"(K = 1) the same formula gives S({k}) = {study.speedup:.2f}x, more than the {STUDY_SPEEDUP:.2f}x it "
           "measured; what the formula leaves out (12 % of the study's time was outside the forwards, and the two "
           "models' costs per layer need not be equal) is not known here, so the formula does not explain the "
           "study's own result. "
           "The cure on such a machine is a cheaper call (a leaner runtime, CUDA graphs on a GPU) or a draft with "
           "fewer layers, not only a smaller one.")
    positions = ", ".join(f"{x:.2f}" for x in a) or "none tested"
    said = ("*Every number in the table is a prediction but E(K), which reads the draft model's per-position "
            f"acceptance a_1, a_2, ... measured in this race ({positions}; from the first position tested fewer than "
            f"{MIN_TESTED} times on, one share pooled over the rest, and read past them; with a draft confidence > 0 a "
            "position counts "
            "only where the draft went on, so E runs high), and this machine's t_v(1), which is timed. A forward "
            "on another machine: t(L) = "
            "D·o + max(bytes / B, L·weights / R), D layers at o ms each besides the arithmetic; c = t_d(1) / "
            "t_v(1), v(K) = t_v(K+1) / t_v(1), S(K) = E(K) / (K c + v(K)). The other machines leave out a round's "
            "own work besides the forwards (sampling, the rule), which would lower their S. The weights are "
            f"this pair's as stored here ({verifier.nbytes / 1e9:.2f} + {draft.nbytes / 1e9:.2f} GB).*")
    sources = "\n".join(f"* **{m.name}**: {m.source}" for m in MACHINES)
    return (f"<h3>What if this race's draft model ran on other hardware?</h3>{table}{here}", fig,
            f"{why}\n\n{said}\n\nWhere the machines' numbers come from:\n\n{sources}")


# ---- the button ---------------------------------------------------------------------------------

def race(loader: Loader, session: Session, form: dict) -> Iterator[RaceView | Problem]:
    """Verifier-only decoding, then every drafter, on the sidebar's settings, one run at a time; a view
    as each run goes, and one when the race has ended or was stopped."""
    settings = read_settings(loader, form, session)
    if isinstance(settings, Problem):
        yield settings
        return
    greedy = settings.decode.sampling.greedy
    cfg = replace(settings.decode, ignore_eos=not greedy)
    runs = heats(loader.pair, settings.prompt, cfg, RACERS, settings.chat_template)
    rows: list[RaceRow] = []
    skipped: list[str] = []
    session.stop, session.running = False, []
    base = None
    cpu = CpuShare()
    try:
        for i, (drafter, gen) in enumerate(runs, 1):
            if isinstance(gen, str):
                skipped.append(f"{DRAFTERS[drafter].label}: {gen}")
                continue
            if session.stop:
                break
            doing = f"Racing {i} of {len(RACERS)}: **{DRAFTERS[drafter].label}**..."
            session.running = [gen]
            yield race_view(rows, skipped, doing, False)
            worker = Worker([[gen]], stopped=lambda: session.stop)
            yield from follow(worker, lambda waiting: race_view(rows, skipped, WAITING if waiting else doing, False),
                              [gen])
            if worker.error is not None:
                yield problem(worker.error)
                return
            if session.stop or not gen.done:
                break
            base = base or gen
            rows.append(row(drafter, gen, base, greedy))
    except ConfigError as e:
        yield problem(e, form)
        return
    finally:
        session.running = []
        runs.close()  # a race ended early leaves the suffix tree's pool as it was
    others = cpu.others()
    busy = (f" **Other processes used {others:.0%} of this machine's cores while it ran**: every run shared the "
            "cores with them, and not all equally (the load changes from run to run), so the speed-ups are "
            "unreliable this time; race again on a quiet machine. Tokens per round, a and identical do not depend "
            "on the load." if others is not None and others >= BUSY_SHARE else "")
    costs, sizes = machine_view(loader.pair)
    yield race_view(rows, skipped, (STOPPED if session.stop else f"**Done:** {len(rows)} runs." + fastest(rows))
                    + busy, True, cfg.k, costs, sizes, busy=bool(busy))


def fastest(rows: list[RaceRow]) -> str:
    """The race's winner in a line, with the two numbers that made it."""
    racers = [r for r in rows if r.drafter != VERIFIER_ONLY.name]
    if not racers:
        return ""
    best = max(racers, key=lambda r: r.speedup)
    c = "" if best.c is None else f", c = {best.c:.2f}"
    return (f" Fastest: **{best.label}**, {best.speedup:.2f}x the baseline ({best.tokens_per_round:.2f} tokens a "
            f"round{c}).")


def machine_view(pair) -> tuple[RoundCosts | None, tuple[ModelSize, ModelSize] | None]:
    """This machine's timed costs (None where the models are not specdec's lean ones, which it times) and
    the pair's sizes for the what-if (None without a draft model)."""
    if pair is None or pair.draft is None:
        return None, None
    sizes = (model_size(pair.target), model_size(pair.draft))
    try:
        require_lean(pair)
    except ConfigError:
        return None, sizes
    with torch.inference_mode():
        return RoundCosts.of_machine(machine_costs(pair)), sizes


# ---- the tab ----------------------------------------------------------------------------------

def build(page: Page, tab_id: str) -> None:
    """The tab, inside ``gr.Tabs``: the buttons, the table with its definitions, the chart and the outputs."""
    loader, session, form = page.loader, page.session, page.form
    with gr.Tab("Race", id=tab_id):
        about = gr.State(None)
        gr.Markdown(INTRO)
        with gr.Row():
            race_b = gr.Button("Race every drafter", variant="primary", min_width=160)
            stop_b = gr.Button("Stop", variant="stop", min_width=90)
        alert = gr.Markdown(elem_classes=["spec-alert"])
        view = {"badge": gr.Markdown(), "table": gr.HTML()}
        gr.Markdown(TRY)
        view["chart"] = gr.Plot(visible=False, show_label=False)
        view["outputs"] = gr.HTML()
        view["whatif"] = gr.HTML()
        view["whatif_chart"] = gr.Plot(visible=False, show_label=False)
        view["whatif_notes"] = gr.Markdown()
    outputs, show = view_outputs(RaceView, view, form, alert, page.sidebar, loader=loader, about=about)

    def listener(session_, *values):
        for i, result in enumerate(race(loader, session_, dict(zip(FORM, values)))):
            yield show(result, first=i == 0)
    race_b.click(listener, [session, *form.values()], outputs).then(None, None, None, js=SHOW_FIELD_ERROR)
    stop_b.click(stop, session, view["badge"])
    page.needs_models.append(race_b)
