"""The Step through tab: one round at a time, revealed phase by phase (draft, verify, accept/reject,
commit and roll back), and the rule run 10,000 times on a position of the round on show.

The engine computes a round in one go; :class:`~specdec_ui.state.Walkthrough` reveals it. The
source of rounds is a live generation on the shared models, or an uploaded trace while the form
still holds its settings (no models needed). A tree round shows its tree, its sibling tests and its
attention mask (:mod:`specdec_ui.tree_views`) in place of the chain's table and charts.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, replace
from functools import partial
from html import escape
from typing import Any, Iterator

import gradio as gr

from specdec import ConfigError, DecodeConfig, Generation, NumericalError, RunSettings
from specdec.decode import registry
from specdec.decode.start import start
from specdec.teach.experiment import histogram
from specdec.teach.render import (
    COLUMNS,
    DASH,
    PHASES_OF_A_ROUND,
    ROW_HEADERS,
    STEP_NAMES,
    UNTESTED_WHY,
    cache_text,
    cost_details,
    draft_stop_text,
    explain,
    output_text,
    plural,
    position_rows,
    segments,
)
from specdec.teach.render_tree import tree_cache_text, tree_explain
from specdec.trace import RoundTrace
from specdec_ui import charts, figure_views, tree_views
from specdec_ui.markup import plain_html, token_html
from specdec_ui.positions import (
    FLAT_TV,
    SAMPLES,
    beyond,
    default_position,
    sample_positions,
    sampled_round,
    tested,
)
from specdec_ui.state import (
    FORM,
    TREE_FIELDS,
    Loader,
    Replay,
    Session,
    Walkthrough,
    changes,
    form_defaults,
    next_round,
    parse_form,
)
from specdec_ui.tree_views import REAL_TREE, REAL_TREE_BUTTON, requested, shape_text
from specdec_ui.views import Problem, WAITING, adaptive_note, busy, problem, read_settings
from specdec_ui.wiring import (
    PLOT_MIN_WIDTH,
    SHOW_FIELD_ERROR,
    Page,
    text_views,
    view_outputs,
)


@dataclass(frozen=True, kw_only=True)
class StepView:
    status: str
    banner: str           # the tree drafter's shape and why, and the temperature-0 caveat, or ""
    real_tree: bool = False  # offer the button that runs a real tree (the tree drafter ran the chain)
    explain: str
    table: str            # HTML: the drafted tokens, as far as the phase has revealed them ("" for a tree)
    dist: Any             # plotly Figure, or None (hidden)
    ratio: Any
    tree: str             # a tree round: HTML, its token tree as SVG; "" for a chain
    tests: str            # a tree round: HTML, the rule's sibling tests in order, once decided
    mask: str             # a tree round: HTML, the verifier's tree attention mask, once verified
    cache: str
    text: str             # HTML: the committed text, colour-coded
    plain: str            # HTML: the same text, plain, whitespace made visible


TREE_ONLY = ("tree", "tests", "mask")  # StepView's HTML fields that only a tree round fills


@dataclass(frozen=True, kw_only=True)
class SampleView:
    """The rule run 10,000 times on one position of the round on show."""

    summary: str
    histogram: Any


# ---- the view of the round on show --------------------------------------------------------------

def table_html(r: RoundTrace, phase: str) -> str:
    """The drafted tokens as an accessible table with the columns ``phase`` has revealed."""
    headers = ROW_HEADERS[:COLUMNS[phase]]
    # at temperature 0 no u is drawn: the column is left out rather than filled with dashes
    greedy = any(pos.tested for pos in r.positions) and all(pos.u is None for pos in r.positions if pos.tested)
    keep = [i for i, h in enumerate(headers) if not (greedy and h == "u")]
    head = "".join(f'<th scope="col">{escape(headers[i])}</th>' for i in keep)
    body = []
    for row, pos in zip(position_rows(r, phase), r.positions):
        row = [row[i] for i in keep]
        cells = "".join(f'<td class="{"dash" if c == DASH else ""}">{escape(str(c))}</td>' for c in row[1:])
        status = pos.status if COLUMNS[phase] > 5 else "pending"
        body.append(f'<tr class="row-{status}"><th scope="row">{row[0]}</th>{cells}</tr>')
    notes = ["q(x): the draft's probability of the token, the distribution it was sampled from",
             "conf.: the draft's top probability before temperature, what the confidence test reads"]
    if COLUMNS[phase] >= 5:
        notes.append("p(x): the verifier's, from its one forward, each assuming the drafts before it are kept")
    if COLUMNS[phase] > 5:
        notes.append("temperature 0: a draft is kept iff it is the verifier's argmax (p/q = 1), no draw is made"
                     if greedy else "u: the uniform draw; a draft is kept iff u ≤ p/q")
        if any(not pos.tested for pos in r.positions):
            notes.append("—: never tested, so no verdict numbers: its p assumed the drafts before it were kept, and "
                         "one of them was not (or it came after a stop token)")
    return (f'<div class="spec-table"><table aria-label="Drafted tokens"><caption>Drafted tokens, round '
            f'{r.index + 1}</caption><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'
            f'<p class="spec-note">{escape("; ".join(notes))}.</p></div>')


GREEDY_BANNER = ("**Temperature 0: the rule has nothing to decide.** p and q are one-hot, so p/q is 1 (same argmax: "
                 "kept) or 0 (rejected), no draw u is made, and a rejected draft is replaced by the verifier's argmax. "
                 "Set a temperature such as 0.8 to see u, p/q and the residual at work.")
GREEDY_TREE_BANNER = ("**Temperature 0: the rule has nothing to decide.** The walk steps to the child that is the "
                      "verifier's argmax; q only ranked the drafted paths and no u is drawn. Set a temperature such as "
                      "0.8 to see the siblings tested in turn against the residual.")


def _cost_details(r: RoundTrace, phase: str, step_fit: tuple[float, float] | None) -> str:
    """The Verify text's letters (the fit, v(K)) behind a toggle, for the learner who wants them."""
    details = cost_details(r.drafted, r.times.verify, step_fit) if phase == "verify" and r.drafted else ""
    return (f'\n\n<details class="spec-details"><summary>Cost details: the fit, and this forward in one-token forwards</summary>\n\n{details}\n\n'
            "</details>") if details else ""


def step_view(walk: Walkthrough, settings, notice: str, step_fit: tuple[float, float] | None = None,
              shape: tuple[int, int, str] | None = None) -> StepView:
    """The round on show, revealed up to its phase, and the text committed so far. ``step_fit``: this
    machine's verifier cost t_f + t_r·L in ms, or None; ``shape``: the tree drafter's (W, N, why) as it ran."""
    drafter, greedy = settings.drafter, settings.decode.sampling.greedy
    segs = segments(list(walk.rounds))
    text, plain = token_html(segs), plain_html(output_text(segs))
    r = walk.shown
    tree_ran = drafter == registry.TREE.name and (shape is None or shape[0] > 1)
    banner = (GREEDY_TREE_BANNER if tree_ran else GREEDY_BANNER) if greedy and drafter != registry.VERIFIER_ONLY.name else ""
    real_tree = drafter == registry.TREE.name and shape is not None and shape[0] == 1
    if drafter == registry.TREE.name and shape is not None:
        offer = (f" Press **{REAL_TREE_BUTTON}** to run W = {REAL_TREE[0]}, N = {REAL_TREE[1]} (draft confidence 0, so "
                 "that every round grows all its nodes) and see one."
                 if real_tree else "")
        banner = "\n\n".join(b for b in (shape_text(*shape) + offer, banner) if b)
    if r is None:
        return StepView(status=notice, banner=banner, real_tree=real_tree, explain="", table="", dist=None, ratio=None,
                        tree="", tests="", mask="", cache="", text=text, plain=plain)
    phase = walk.phase
    where = {"draft": "drafted", "verify": "drafted and verified", "accept": "drafted, verified and decided",
             "commit": "drafted, verified, decided and committed"}[phase]
    last = phase == PHASES_OF_A_ROUND[-1]
    nxt = (" Next: **Draft** (or **Step round**) for the next round." if last else
           f" Next: **{STEP_NAMES[PHASES_OF_A_ROUND[PHASES_OF_A_ROUND.index(phase) + 1]]}**.")
    decided = phase in ("accept", "commit")
    status = f"{notice}Round {r.index + 1}: {where}.{nxt}"
    if r.tree is not None:  # the tree, its tests and its mask stand in for the chain's table and charts
        asked = (settings.decode.tree_width, settings.decode.tree_nodes)
        paragraph = (tree_explain(r, phase, greedy, settings.decode.k, settings.decode.confidence, step_fit)
                     + _cost_details(r, phase, step_fit))
        return StepView(status=status, banner=banner, real_tree=real_tree, explain=paragraph, table="", dist=None,
                        ratio=None,
                        tree=tree_views.tree_html(r, phase, greedy, asked),
                        tests=tree_views.tests_html(r, greedy) if decided else "",
                        mask=tree_views.mask_html(r, phase) if phase != "draft" else "",
                        cache=tree_cache_text(r, phase), text=text, plain=plain)
    paragraph = explain(r, phase, drafter, greedy, step_fit) + _cost_details(r, phase, step_fit)
    if phase == "draft" and r.positions:
        paragraph += " " + draft_stop_text(r, settings.decode.k, settings.decode.confidence)
    return StepView(
        status=status, banner=banner, real_tree=real_tree, explain=paragraph,
        table=table_html(r, phase) if r.positions else "",
        dist=charts.distribution_figure(r) if decided else None,
        ratio=charts.ratio_figure([r]) if decided and r.positions else None,
        tree="", tests="", mask="", cache=cache_text(r, phase), text=text, plain=plain)


# ---- the buttons -------------------------------------------------------------------------------

ALL_K_LABEL = "Draft all K tokens every round (this tab only)"
ALL_K_WHY = ("While ticked, every round here drafts all K (**Draft confidence** and **Adaptive K** off), so that you "
             "see the rule test several drafts; untick it to draft as Run and Compare do.")
ADAPTIVE_OFF = ("Adaptive K is off in this tab while **Draft all K tokens every round** is ticked: untick it to see "
                "Adaptive K choose each round. ")


def _same_run(a: RunSettings, b: RunSettings) -> bool:
    """The same run, as far as the form reads it (W and N only with the tree drafter)."""
    def read(s: RunSettings):
        return s.decode if s.drafter == registry.TREE.name else replace(s.decode, **{n: form_defaults()[n] for n in TREE_FIELDS})
    return (a.prompt, a.drafter, read(a)) == (b.prompt, b.drafter, read(b))


def _same_form(a: RunSettings | None, b: RunSettings) -> bool:
    """The same run but for what the "draft all K" switch overrides (draft confidence, Adaptive K)."""
    if a is None:
        return False
    free = {"confidence": 0.0, "adaptive": False}
    return replace(a, decode=replace(a.decode, **free)) == replace(b, decode=replace(b.decode, **free))


def _step_source(loader: Loader, session: Session, form: dict, all_k: bool = False):
    """The settings and, when they are new, a fresh source of rounds: the uploaded trace while
    the form still holds its settings (no models needed), else a generation on the models.
    ``all_k``: the live generation drafts all K tokens every round (draft confidence 0, adaptive K off)."""
    if session.replay is not None:
        try:
            settings = parse_form(form)
        except ConfigError as e:
            return problem(e, form), None
        replayed = RunSettings.from_dict(session.replay.settings)
        if _same_run(settings, replayed):
            fresh = not isinstance(session.gen, Replay) or session.gen.trace is not session.replay
            return replayed, Replay(session.replay) if fresh else None
        session.replay = None  # the learner changed a setting: leave the replay for a live run
    settings = read_settings(loader, form, session)
    if isinstance(settings, Problem):
        return settings, None
    if all_k:
        settings = replace(settings, decode=replace(settings.decode, confidence=0.0, adaptive=False))
    # a generation holds the pair it began on: after a switch of the models it is not continued
    if not isinstance(session.gen, Generation) or session.gen.pair is not loader.pair or settings != session.settings:
        return settings, start(loader.pair, settings.prompt, settings.decode, settings.drafter)
    return settings, None


def step(loader: Loader, action: str, session: Session, form: dict, all_k: bool = False
         ) -> Iterator[StepView | Problem]:
    """action: draft | verify | accept | commit | step | reset (see :class:`~specdec_ui.state.Walkthrough`).
    ``all_k``: draft all K tokens every round, whatever the form's draft confidence (the page's
    default in this tab, :data:`ALL_K_WHY`), so that each round shows the rule on several drafts.
    A view that says it waits comes first when another session's round holds the models."""
    with session.stepping:
        yield from _step(loader, action, session, form, all_k)


def _step(loader: Loader, action: str, session: Session, form: dict, all_k: bool) -> Iterator[StepView | Problem]:
    try:
        settings, fresh = _step_source(loader, session, form, all_k)
    except ConfigError as e:
        yield problem(e, form)
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
                switched = session.all_k is not None and session.all_k != all_k  # the switch changed, not the form
                what = ("The uploaded trace" if isinstance(fresh, Replay) else
                        f"**{ALL_K_LABEL}**" if switched and _same_form(session.settings, settings) else
                        ", ".join(changes(session.settings, settings)) or "Settings")
                notice = (f"{what} changed: the step-through restarted from the prompt ({kept} round"
                          f"{'s' * (kept != 1)} on show discarded). ")
            session.restart(settings, fresh)
        session.all_k = all_k
        walk = session.walk
        live = isinstance(session.gen, Generation)
        # a live round is compared with this machine's cost fit; a replayed one was timed on another machine
        view = partial(step_view, settings=settings, step_fit=loader.step_fit if live else None,
                       shape=_shape(settings, session.gen.cfg if live else settings.decode, session.gen))
        if walk.needs_round(action) and live and busy(loader):
            yield replace(view(walk, notice=""), status=WAITING)
        new_round = next_round(session.gen) if walk.needs_round(action) else None
    except (ConfigError, NumericalError) as e:
        yield problem(e, form)
        return
    session.walk, said = walk.press(action, new_round, session.gen.stop_reason)
    source = "" if live else f"Replaying the uploaded trace (no models run), {len(session.gen.trace.rounds)} rounds. "
    note = adaptive_note(settings).strip() if live and not all_k else ""
    off = (ADAPTIVE_OFF if live and all_k and form.get("adaptive") in (True, "True", "true") else "") + (
        note + " " if note else "")
    yield view(session.walk, notice=off + source + notice + said)


def _shape(settings: RunSettings, ran: DecodeConfig, gen) -> tuple[int, int, str] | None:
    """The tree drafter's (W, N, why) as the run recorded them where this machine chose (a trace records
    the shape only); None where the learner set it, or for the other drafters."""
    if settings.drafter != registry.TREE.name or (requested(settings) and isinstance(gen, Generation)):
        return None
    why = gen.tree_shape if isinstance(gen, Generation) else f"W = {ran.tree_width}, N = {ran.tree_nodes}, as recorded"
    return ran.tree_width, ran.tree_nodes, why


def replayed_step(session: Session, path: str | None) -> StepView | None:
    """This tab once ``path`` is replayed: the trace, none of its rounds stepped yet; None (the tab left as
    it is) when the upload was refused or the tab steps something else."""
    gen, walk = session.gen, session.walk
    if not path or not isinstance(gen, Replay) or gen.trace is not session.replay or walk.shown is not None:
        return None
    settings = session.settings
    status = (f"Replaying {os.path.basename(path)}: {plural(len(gen.trace.rounds), 'round', 'rounds')} of the "
              "uploaded trace, no models run, its settings in the sidebar. Press **Draft** or **Step round** to "
              "step through it.")
    return step_view(walk, settings, status, shape=_shape(settings, settings.decode, gen))


# ---- losslessness, seen: the rule run 10,000 times on one position --------------------------------

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
    if settings.drafter == registry.LOOKUP.name:
        return ("The prompt-lookup drafter's q is one-hot: it copies the tokens that followed a match in the text",
                "pick the drafter 'draft model'")
    return None


def sample_is_stale(session: Session) -> bool:
    """The sampler's result on the page belongs to a round no longer on show."""
    return session.sampled is not None and session.sampled is not sampled_round(session)


def sample(session: Session, position=None) -> SampleView | Problem:
    """Run the pure rule 10,000 times on one tested position of the round on show: the learner's pick
    (1-based), else the one where the argmax bug lands farthest beyond the noise of 10,000 rounds."""
    if session.walk.shown is not None and session.walk.shown.tree is not None:
        return Problem("This runs the chain's rule on one drafted position; a tree round tests siblings in turn "
                       "against a moving residual instead. Pick the drafter 'draft model' to run it.")
    r = sampled_round(session)
    if r is None:
        return Problem("Step a round through Accept/reject first (a round that drafted something): the rule is run "
                       "on one of its tested positions.")
    at = tested(r)
    listed = ", ".join(map(str, at))
    if isinstance(position, float) and position.is_integer():
        position = int(position)
    if position is not None and not (isinstance(position, int) and not isinstance(position, bool)):
        return Problem(f"Pick a position of round {r.index + 1} from the list (its tested positions: {listed}); "
                       f"got {position!r}.")
    if position is not None and position not in at:
        if not 1 <= position <= len(r.positions):
            drafted = plural(len(r.positions), "token", "tokens")
            return Problem(f"Round {r.index + 1} has no position {position}: it drafted {drafted}. Pick one of its "
                           f"tested positions: {listed}.")
        pos = r.positions[position - 1]
        return Problem(f"Position {position} ({pos.text!r}) decided nothing ({UNTESTED_WHY[pos.status]}), so there "
                       f"is no rule to run there. Pick one of the round's tested positions: {listed}.")
    same = _bug_cannot_show(session.settings)
    default = default_position(at)
    i = default if position is None else position
    tv, bound = at[i]
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
                + ("beyond it." if beyond(tv, bound) else "within it (the list marks the positions beyond it)."))
    elif beyond(tv, bound):
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
    elif not beyond(tv, bound):
        title = "Why no difference here" if tv < FLAT_TV else f"Why the difference is small here ({tv:.3f})"
        lines.append(f"\n**{title}:** the bug always drafts q's top token x*. Where q is (nearly) "
                     "one-hot, that argmax *is* a sample of q; where p is (nearly) one-hot on x*, the rule keeps x* "
                     "every time, just as p would emit it. Either way the bug emits what p emits. It shows where q is "
                     "spread out and p is not sure of x*: p ≈ q is not enough (with p = q = (0.5, 0.5) the bug emits "
                     "x* every time, 0.5 away from p). To see it: "
                     + ("pick a position the list marks beyond the noise." if any(beyond(*t) for t in at.values())
                        else "step another round, let p and q spread out (a higher temperature, a larger top-k or "
                             "top-p in the sidebar), or load a position into the **Rule** tab and try its presets."))
    session.sampled = r
    return SampleView(summary="\n".join(lines), histogram=charts.histogram_figure(h))


# ---- the tab ----------------------------------------------------------------------------------

SAMPLE_INTRO = ("After **Accept/reject**, this runs the rule (no model) 10,000 times on the tested position where the "
                "argmax bug lands farthest beyond sampling noise, or on the one you pick, beside the bug.")


def build(page: Page, tab_id: str) -> None:
    """The tab, inside ``gr.Tabs``: the phase buttons stay in view (sticky), the round below them."""
    loader, session, form = page.loader, page.session, page.form
    with gr.Tab("Step through", id=tab_id):
        about = gr.State(None)  # the field the alert is about: a state inside its tab (one beside the tabs broke them)
        with gr.Column(elem_classes=["spec-controls"], elem_id="step-controls"):
            with gr.Row():
                buttons = {a: gr.Button(STEP_NAMES[a], min_width=80, size="md", scale=scale, elem_classes=["step-b"])
                           for a, scale in zip(PHASES_OF_A_ROUND, (2, 2, 3, 4))}
                buttons["step"] = gr.Button("Step round", variant="primary", min_width=80, size="md", scale=3,
                                            elem_classes=["step-b"])
                buttons["reset"] = gr.Button("Reset", min_width=80, size="md", scale=2, elem_classes=["step-b"])
            view = {"status": gr.Markdown("Press **Draft** to propose K tokens, then **Verify**, **Accept/reject** "
                                          "and **Commit and roll back**; or **Step round** for a whole round.")}
            alert = gr.Markdown(elem_classes=["spec-alert"])
        with gr.Row(elem_classes=["spec-all-k"]):
            all_k = gr.Checkbox(True, label=ALL_K_LABEL, scale=0, min_width=200)
            gr.Markdown(ALL_K_WHY, elem_classes=["spec-note"])
        view["banner"] = gr.Markdown()
        with gr.Column(visible=False) as view["real_tree"]:  # when the tree drafter ran the chain
            with gr.Row():
                real_tree_b = gr.Button(REAL_TREE_BUTTON, size="sm", variant="primary", scale=0, min_width=180)
        with gr.Row():
            with gr.Column(min_width=320):
                view["explain"] = gr.Markdown()
                view["table"] = gr.HTML()
                view["cache"] = gr.Markdown()
            with gr.Column(min_width=320):
                view["mask"] = gr.HTML(visible=False)
                view["dist"] = gr.Plot(visible=False, show_label=False, min_width=PLOT_MIN_WIDTH)
                view["ratio"] = gr.Plot(visible=False, show_label=False, min_width=PLOT_MIN_WIDTH)
        view["tree"] = gr.HTML(visible=False)  # a tree round's tree: the page's whole width, wide trees scroll inside
        view["tests"] = gr.HTML(visible=False)  # a tree round's sibling tests: ten columns, the page's whole width
        figure = figure_views.figure_section(loader, session)
        view["text"], view["plain"] = text_views("step")
        with gr.Accordion("Losslessness, seen: run the rule 10,000 times on this round", open=False):
            with gr.Row(equal_height=True):
                picker = gr.Dropdown([], value=None, label="Position to sample (the round's tested positions)",
                                     scale=3)
                sample_b = gr.Button("Sample 10,000 times", size="sm", scale=1)
            sample_alert = gr.Markdown(elem_classes=["spec-alert"])
            shown_sample = {"summary": gr.Markdown(SAMPLE_INTRO),
                            "histogram": gr.Plot(visible=False, show_label=False)}
    outputs, show = view_outputs(StepView, view, form, alert, page.sidebar, loader=loader, about=about,
                                 hide_empty=TREE_ONLY)

    def fill_picker(s):
        """The picker for the round on show; a sample of a round no longer on show is cleared."""
        choices, default = sample_positions(s)
        if not sample_is_stale(s):
            return gr.update(choices=choices, value=default), gr.skip(), gr.skip()
        s.sampled = None
        return gr.update(choices=choices, value=default), SAMPLE_INTRO, gr.update(value=None, visible=False)
    refill = dict(fn=fill_picker, inputs=session, outputs=[picker, shown_sample["summary"], shown_sample["histogram"]],
                  show_progress="hidden")

    def stepping(action: str):
        def listener(session_, all_k_, *values):
            for i, result in enumerate(step(loader, action, session_, dict(zip(FORM, values)), all_k_)):
                yield show(result, first=i == 0)
        return listener
    for action, button in buttons.items():
        button.click(stepping(action), [session, all_k, *form.values()], outputs).then(
            None, None, None, js=SHOW_FIELD_ERROR).then(**refill).then(**figure)
    # the real tree's shape into the sidebar, then its first round drafted (the change restarts the step-through)
    real_tree_b.click(lambda: REAL_TREE, None, [form["tree_width"], form["tree_nodes"], form["confidence"]],
                      queue=False).then(stepping("draft"), [session, all_k, *form.values()],
                                        outputs).then(**refill).then(**figure)
    sample_outputs, sample_show = view_outputs(SampleView, shown_sample, {}, sample_alert, None)
    sample_b.click(lambda s, at: sample_show(sample(s, at)), [session, picker], sample_outputs)

    def replayed(upload_event, upload) -> None:
        """After a trace is uploaded, this tab switches to it at once: no round of the old run left on show."""
        upload_event.then(lambda s, path: show(replayed_step(s, path)), [session, upload], outputs).then(
            **refill).then(**figure)
    page.on_upload.append(replayed)
    page.needs_models += [*buttons.values(), real_tree_b]
    page.all_k = all_k
