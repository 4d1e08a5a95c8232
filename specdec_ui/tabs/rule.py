"""The Rule tab: the accept/reject rule on a p and q the learner sets, no models needed.

A handful of tokens, a weight per token for p (verifier) and for q (draft), each column divided by
its total. Live: where p and q overlap (β = Σ min(p, q)), the residual, the chance of keeping each
token, and the tokens per round E(α, K) a constant α = β would give. One click samples the pure rule
(:func:`specdec.teach.experiment.emitted`, through :func:`specdec.decode.rule.verify`) beside one classic bug. A
preset loads one tested position of the round the Step through tab shows, its top tokens and the rest
lumped (:func:`specdec.teach.experiment.lumped`), as its sample view does.

The handlers are plain functions of the weights and return view records (or a Problem); ``build``
wires them into one tab.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape
from typing import Any

import gradio as gr
import torch

from specdec.teach.experiment import (
    BUGS,
    OTHER,
    exact_emitted,
    lumped,
    overlap,
    sample_rule_and_bug,
    tv_distance,
)
from specdec.teach.theory import tokens_per_round
from specdec_ui import charts
from specdec_ui.positions import sample_positions
from specdec_ui.state import Session
from specdec_ui.views import Problem
from specdec_ui.wiring import Page

SLOTS = 10  # token rows on the page: the example's 6, or a real position's top 9 and the rest lumped
EXAMPLE = (("mat", "floor", "sofa", "bed", "rug", "roof"),  # after "The cat sat on the"
           (40.0, 20.0, 15.0, 12.0, 8.0, 5.0), (25.0, 30.0, 10.0, 15.0, 5.0, 15.0))
PRESETS = {"example": "The example sentence", "equal": "q = p", "uniform": "q uniform", "sharp": "q too sharp",
           "missing": "q misses p's top token"}
NOTES = {
    "example": "The example: the verifier's p and a draft's q for the word after *The cat sat on the*.",
    "equal": "**q = p**: every draft is kept (β = 1) and the residual is never needed.",
}
EDITED = "**Your own p and q**: the weights as you set them (a preset's caption holds for the q it sets)."
BUG_WHY = {
    "argmax": "the draft takes q's top token every time but reports its softmax q to the rule (transformers #32867)",
    "unnormalised": "the replacement is drawn from max(0, p − q) as if it summed to 1: a uniform u in [0, 1) against "
                    "its running sum, which stops at 1 − β, so every u past it lands on the last token the residual "
                    "reaches",
    "swapped": "the verification takes q for the verifier and p for the draft: the ratio q(x)/p(x) and the residual "
               "norm(max(0, q − p)); the draft still samples from q",
}
SAMPLE_SIZES = (1_000, 10_000, 100_000)
K_MAX = 16
SAMPLE_INTRO = "Press **Sample M times** to run the rule and the bug M times each on the p and q above."
WEIGHTS = ("Weights from 0 to 100, one per token: each column is divided by its total, so they need not add up "
           "to 100 (the table shows p and q normalised).")


@dataclass(frozen=True)
class Weights:
    """What the sliders hold: the tokens, a weight (0 to 100) per token for p and for q, and what was loaded."""

    labels: tuple[str, ...]
    p: tuple[float, ...]
    q: tuple[float, ...]
    note: str


@dataclass(frozen=True, kw_only=True)
class RuleView:
    numbers: str          # HTML: per token p, q, min(p, q), min(1, p/q), the residual; then β and the acceptance
    overlap: Any          # plotly Figure: p and q, the overlap and the residual
    rounds: str           # E(α, K) and kept / drafted at the K chosen
    k_chart: Any          # plotly Figure: E(α, K) over K


@dataclass(frozen=True, kw_only=True)
class RuleSampleView:
    summary: str
    histogram: Any


def shown(label: str) -> str:
    """A token as the page names it."""
    return "all other tokens" if label == OTHER else charts.token_label(label)


def weight_name(letter: str, label: str) -> str:
    """A weight's slider label, and the field its messages name: ``p('mat')``."""
    return f"{letter}({shown(label)})"


def slider_names(labels) -> list[str | None]:
    """The fields the sliders hold, in their order on the page: the p sliders, the q sliders (None for a
    row not shown), then K."""
    return [weight_name(letter, labels[i]) if i < len(labels) else None
            for letter in "pq" for i in range(SLOTS)] + ["K"]


def slider_messages(result, labels, before: str | None) -> tuple[list, str | None]:
    """Each slider's message line after ``result``: the message of the slider a Problem names, the
    slider ``before`` (the one that had the message) back to none, the rest left as they are; and
    the slider that now has one."""
    now = result.field if isinstance(result, Problem) and result.field in slider_names(labels) else None
    out = []
    for name in slider_names(labels):
        if name is not None and name == now:
            out.append(gr.update(info=result.message, elem_classes=["field-error"]))
        elif name is not None and name == before:
            out.append(gr.update(info=None, elem_classes=[]))
        else:
            out.append(gr.skip())
    return out, now


def read(labels, p_weights, q_weights) -> tuple[torch.Tensor, torch.Tensor] | Problem:
    """The sliders' weights as (C,) p and q, each divided by its total; a Problem names the first bad one."""
    out = []
    for letter, role, weights in (("p", "verifier", p_weights), ("q", "draft", q_weights)):
        values = list(weights)[:len(labels)]
        for label, w in zip(labels, values):
            field = weight_name(letter, label)
            if w is None or (isinstance(w, float) and math.isnan(w)):
                return Problem(f"{field} is empty: enter a weight from 0 to 100.", field)
            if not 0 <= w <= 100:
                return Problem(f"{field} must be a weight from 0 to 100 (got {w:g}).", field)
        if not sum(values) > 0:
            return Problem(f"{letter} ({role}) is all zero: give at least one token a {letter} weight above 0 "
                           "(each column is divided by its total).", letter)
        t = torch.tensor(values, dtype=torch.float64)
        out.append(t / t.sum())
    return out[0], out[1]


def _num(x) -> str:
    """Three decimals; a weight above 0 that would read 0.000 says so, not zero."""
    x = float(x)
    return "<0.001" if 0 < x < 0.0005 else f"{x:.3f}"


def _table(labels, p: torch.Tensor, q: torch.Tensor) -> str:
    shared, residual, _, beta = overlap(p, q)
    norm = residual / residual.sum() if beta < 1 else None
    rows = []
    for i, label in enumerate(labels):
        keep = f"{min(1.0, float(p[i] / q[i])):.3f}" if q[i] > 0 else "— (q = 0: never drafted)"
        res = _num(norm[i]) if norm is not None else "—"
        rows.append(f"<tr><th scope='row'>{escape(shown(label))}</th><td>{_num(p[i])}</td><td>{_num(q[i])}"
                    f"</td><td>{_num(shared[i])}</td><td>{keep}</td><td>{res}</td></tr>")
    rows.append(f"<tr><th scope='row'>Σ</th><td>1</td><td>1</td><td>β = {beta:.3f}</td><td></td>"
                f"<td>{'1' if norm is not None else '— (never needed)'}</td></tr>")
    head = ("<tr><th scope='col'>token x</th><th scope='col'>p(x)</th><th scope='col'>q(x)</th>"
            "<th scope='col'>min(p, q)</th><th scope='col'>kept if drafted: min(1, p/q)</th>"
            "<th scope='col'>residual norm(max(0, p − q))</th></tr>")
    return (f'<div class="spec-table"><table aria-label="The rule per token"><caption>Per token, p and q normalised'
            f'</caption><thead>{head}</thead><tbody>{"".join(rows)}</tbody></table></div>')


def live(labels, p_weights, q_weights, k) -> RuleView | Problem:
    """What the rule does with these p and q, and the tokens per round at K drafts."""
    pq = read(labels, p_weights, q_weights)
    if isinstance(pq, Problem):
        return pq
    if not (isinstance(k, (int, float)) and not isinstance(k, bool) and float(k).is_integer() and 1 <= k <= K_MAX):
        return Problem(f"K must be a whole number from 1 to {K_MAX} (got {'nothing' if k is None else repr(k)}).", "K")
    p, q = pq
    k = int(k)
    beta = overlap(p, q)[3]
    accepted = float(sum(q[i] * min(1.0, float(p[i] / q[i])) for i in range(len(q)) if q[i] > 0))
    e = tokens_per_round(beta, k)
    numbers = (_table(labels, p, q) +
               f'<p class="rule-beta"><b>β = Σ min(p, q) = {beta:.3f}</b>: the overlap of p and q, the chance a draft '
               f"drawn from q is kept at this position.<br><b>Acceptance of a drafted token = Σ q(x)·min(1, p(x)/q(x)) "
               f"= {accepted:.3f}</b>: the draft drafts x with q(x) and the rule keeps it with min(1, p(x)/q(x)); "
               f"each term is min(p(x), q(x)), so this is β. On a rejection (1 − β = {1 - beta:.3f}) the replacement "
               "is drawn from the residual.</p>")
    rounds = (f"With **α = β = {beta:.3f}** at every position (independently; α is the notation card's E[β]): "
              f"**E(α, K) = (1 − α^(K+1)) / (1 − α) = {e:.2f} tokens per round** at K = {k} (at most K + 1 = "
              f"{k + 1}; plain decoding: 1). **kept / drafted = (E − 1) / K = {(e - 1) / k:.3f}**: "
              "the drafts after a rejection are never tested, so it falls as K grows while α does not.")
    return RuleView(numbers=numbers, overlap=charts.overlap_figure(p, q, list(labels)), rounds=rounds,
                    k_chart=charts.tokens_per_round_k_figure(beta, k, K_MAX))


def preset(name: str, labels, p_weights) -> Weights | Problem:
    """A preset q against the p on show ("example" restores the example's tokens, p and q), with a caption
    computed from the p and q it leaves on show, so that it holds for any p."""
    if name == "example":
        return Weights(*EXAMPLE, NOTES[name])
    labels = tuple(labels)
    checked = read(labels, p_weights, p_weights)  # p alone: a bad weight is named before any q is made from it
    if isinstance(checked, Problem):
        return checked
    p_shown = checked[0]
    p = tuple(float(w) for w in list(p_weights)[:len(labels)])
    n, top = len(p), int(p_shown.argmax())
    if name == "equal":
        q = p
    elif name == "uniform":
        q = (round(100 / n, 1),) * n
    elif name == "sharp":  # halfway from p to all on p's top token: sharper there, p's shape halved elsewhere
        q = tuple(round(50 * (float(v) + (i == top)), 1) for i, v in enumerate(p_shown))
        if not _above(q[top] / sum(q), p_shown[top]):  # p nearly one-hot: halfway rounds back to p
            q = tuple(100.0 * (i == top) for i in range(n)) if _above(1, p_shown[top]) else p
    else:  # missing: p's shape elsewhere; where p has no other mass, an even spread over the others
        q = tuple(w if i != top else 0.0 for i, w in enumerate(p))
        if not sum(q):
            q = tuple(0.0 if i == top else 1.0 for i in range(n))
    q_shown = torch.tensor(q, dtype=torch.float64) / sum(q)
    return Weights(labels, p, q, _note(name, labels, p_shown, q_shown, top))


def _note(name: str, labels, p: torch.Tensor, q: torch.Tensor, top: int) -> str:
    """The caption of preset ``name``, from the (C,) p and q it leaves on show (p's top token at ``top``)."""
    if name == "equal":
        return NOTES[name]
    beta = overlap(p, q)[3]
    x, p_x, q_x = shown(labels[top]), float(p[top]), float(q[top])
    rejected = f"a drafted token is rejected with chance 1 − β = {_num(1 - beta)}"
    if name == "uniform":
        over = [f"{shown(label)} ({_num(p[i])})" for i, label in enumerate(labels) if _above(q[i], p[i])]
        if not over:
            return (f"**q uniform**: the draft gives each of the {len(labels)} tokens {_num(q[0])}; p is uniform "
                    "too, so q = p and every draft is kept (β = 1).")
        return (f"**q uniform**: the draft gives each of the {len(labels)} tokens {_num(q[0])}, more than p gives "
                f"{_listed(over)}: it over-drafts {'them' if len(over) > 1 else 'it'}, and the rule rejects the "
                f"excess: {rejected}.")
    if name == "sharp":
        if not _above(q_x, p_x):
            return (f"**q too sharp**: p is already one-hot on {x} (p = {_num(p_x)} to three decimals), so no draft "
                    "can be sharper; q = p, and every draft is kept (β = 1).")
        return (f"**q too sharp**: the draft puts {_num(q_x)} on p's top token {x}, more than p's {_num(p_x)} (q is "
                f"p pulled towards {x}); the rule keeps a drafted {x} with p/q = {p_x / q_x:.3f} and rejects "
                f"the excess ({rejected}); the residual gives the other tokens back their share.")
    residual = (p - q).clamp_min(0)
    share = float(residual[top] / residual.sum())
    return (f"**q misses p's top token**: the draft never drafts {x} (q = 0 there, p = {_num(p_x)}), so {x} only "
            f"comes from the residual, after a rejection: {rejected}, and the residual puts {_num(share)} on {x}: "
            f"{_num(1 - beta)} × {_num(share)} = {_num((1 - beta) * share)} = p({x}). The output is still p.")


def _above(a, b) -> bool:
    """a above b as the table shows them (three decimals)."""
    return round(float(a), 3) > round(float(b), 3)


def _listed(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def round_positions(session: Session) -> tuple[list[tuple[str, int]], int | None]:
    """The tested positions of the Step through round on show (as its sample view offers them)."""
    return sample_positions(session)


def from_round(session: Session, position=None) -> Weights | Problem:
    """One tested position of the Step through round on show: its top tokens and the rest lumped, as
    weights rounded to 0.01 (the one Step through's sampler takes unless ``position``, 1-based, is given)."""
    choices, default = round_positions(session)
    if not choices:
        shown_round = session.walk.shown
        if shown_round is not None and shown_round.tree is not None:
            return Problem("The round on show in Step through is a tree round; this loads one position of a chain "
                           "round. Pick the drafter 'draft model' there and step a round.", "position")
        return Problem("No real round yet: in the Step through tab, step a round through Accept/reject (or press Step "
                       "round), then come back and load one of its positions.", "position")
    if isinstance(position, float) and position.is_integer():
        position = int(position)
    i = default if position not in [v for _, v in choices] else position
    r = session.walk.shown
    pos = r.positions[i - 1]
    labels, p, q = lumped(pos)
    if len(labels) > SLOTS:  # the top SLOTS - 1 (the drafted token among them), the rest into OTHER
        ids = [c.token_id for c in pos.candidates]
        keep = list(range(SLOTS - 1))
        x = ids.index(pos.token_id)
        if x >= SLOTS - 1:
            keep[-1] = x
        rest = [j for j in range(len(labels)) if j not in keep]
        labels = tuple(labels[j] for j in keep) + (OTHER,)
        p = torch.cat([p[keep], p[rest].sum(0, keepdim=True)])
        q = torch.cat([q[keep], q[rest].sum(0, keepdim=True)])
    weights = lambda t: tuple(round(100 * float(v), 2) for v in t)  # noqa: E731
    note = (f"Loaded **round {r.index + 1}, position {i}** of Step through (drafted {pos.text!r}, {pos.status}): its top "
            "tokens, every other token lumped into one, as weights in percent rounded to 0.01. The trace's β there, over "
            f"the whole vocabulary: {pos.beta:.3f}; lumped tokens overlap as one (min(Σ p, Σ q) ≥ Σ min(p, q)), so β here "
            "can be higher.")
    return Weights(labels, weights(p), weights(q), note)


def sample(labels, p_weights, q_weights, n, bug: str, seed: int = 0) -> RuleSampleView | Problem:
    """The rule and ``bug`` each run ``n`` times on these p and q, with their TV from p against the bound."""
    pq = read(labels, p_weights, q_weights)
    if isinstance(pq, Problem):
        return pq
    if n not in SAMPLE_SIZES:
        return Problem(f"M must be one of {', '.join(f'{s:,}' for s in SAMPLE_SIZES)} (got {n!r}).", "n")
    if bug not in BUGS:
        return Problem(f"Pick a bug from the list: {', '.join(BUGS.values())} (got {bug!r}).", "bug")
    p, q = (t.float() for t in pq)
    hist = sample_rule_and_bug(tuple(labels), p, q, n, seed, bug)
    bound, exact = hist.noise_bound, tv_distance(exact_emitted(p, q, bug), p)
    where = lambda tv: "within the bound: lands on p" if tv <= bound else "**outside the bound: lands off p**"  # noqa: E731
    lines = [f"{n:,} one-draft rounds each (seed {seed}). TV = ½ Σ |freq − p|, the total variation of a histogram "
             f"from p; the noise bound 1.5 · Σ √(p(1 − p)/M) = **{bound:.3f}** is what sampling noise alone may give "
             "(docs/notation.md).",
             f"* **The rule** (draft x from q, keep it iff u ≤ p(x)/q(x), else draw from the residual; "
             f"`specdec.decode.rule.verify`): TV from p = **{hist.tv_correct:.3f}**, {where(hist.tv_correct)}.",
             f"* **The bug, {BUGS[bug]}** ({BUG_WHY[bug]}): TV from p = **{hist.tv_bug:.3f}**, {where(hist.tv_bug)} "
             f"(its exact TV: {exact:.3f})."]
    if exact <= bound:
        lines.append("\nOn this p and q the bug happens to emit (almost) p: pick another preset to see it land off p.")
    return RuleSampleView(summary="\n".join(lines), histogram=charts.histogram_figure(hist))


# ---- the tab ----------------------------------------------------------------------------------

INTRO = ("**The rule on a p and q you set** (no models needed). A draft x drawn from q is kept with probability "
         "min(1, p(x)/q(x)); the first rejected one is replaced by a draw from the residual norm(max(0, p − q)). "
         "Drag the weights or pick a preset: everything below follows at once. Names as in docs/notation.md: "
         "**p** = verifier, **q** = draft.")


def _slider(minimum: float, maximum: float, value: float, step: float, label: str, **kw) -> gr.Slider:
    slider = gr.Slider(minimum, maximum, value, step=step, label=label, buttons=[], **kw)  # no reset: to what?
    # a value typed into the slider's box reaches the handler as typed (empty, out of range), which answers it
    # naming the field; gradio's own check would name neither the field nor, for an empty box, the problem
    slider.preprocess = lambda payload: payload
    return slider


def _slider_updates(w: Weights) -> list:
    """The rows shown, then the p sliders, then the q sliders, for weights ``w``."""
    n = len(w.labels)
    rows = [gr.update(visible=i < n) for i in range(SLOTS)]
    good = dict(info=None, elem_classes=[])  # weights that load are good ones: no slider keeps a message
    ps = [gr.update(value=w.p[i], label=weight_name("p", w.labels[i]), **good) if i < n else gr.update(**good)
          for i in range(SLOTS)]
    qs = [gr.update(value=w.q[i], label=weight_name("q", w.labels[i]), **good) if i < n else gr.update(**good)
          for i in range(SLOTS)]
    return rows + ps + qs


def build(page: Page, tab_id: str) -> None:
    """The tab, inside ``gr.Tabs``; it reads the page's session for the Step through round on show."""
    session = page.session
    labels0, p0, q0 = EXAMPLE
    first = live(labels0, p0, q0, 4)
    with gr.Tab("Rule", id=tab_id) as tab:
        gr.Markdown(INTRO)
        labels = gr.State(labels0)
        bad = gr.State(None)  # the slider whose message is on show (a state beside the tabs broke gradio's tab row)
        with gr.Row():
            buttons = {name: gr.Button(words, size="sm", min_width=120) for name, words in PRESETS.items()}
        with gr.Row(equal_height=True):
            picker = gr.Dropdown([], value=None, label="Position of the round on show in Step through", scale=3,
                                 min_width=200)
            load_b = gr.Button("This position of the current real round", size="sm", scale=1, min_width=160)
        note = gr.Markdown(NOTES["example"])
        alert = gr.Markdown(elem_classes=["spec-alert"])
        with gr.Row(elem_classes=["rule-main"]):  # a narrow screen shows the chart and numbers first (CSS)
            with gr.Column(min_width=320):
                gr.Markdown(WEIGHTS, elem_classes=["spec-note"])
                rows, ps, qs = [], [], []
                for i in range(SLOTS):
                    on = i < len(labels0)
                    with gr.Row(visible=on) as row:
                        ps.append(_slider(0, 100, p0[i] if on else 0, 0.1,
                                          weight_name("p", labels0[i]) if on else "p", min_width=150))
                        qs.append(_slider(0, 100, q0[i] if on else 0, 0.1,
                                          weight_name("q", labels0[i]) if on else "q", min_width=150))
                    rows.append(row)
            with gr.Column(min_width=320):
                view = {"overlap": gr.Plot(first.overlap, show_label=False, min_width=300),
                        "numbers": gr.HTML(first.numbers)}
        k = _slider(1, K_MAX, 4, 1, "K (drafts per round), with α = β held constant")
        with gr.Row():
            with gr.Column(min_width=300):  # a narrow screen stacks the text over the chart, never squeezes it
                view["rounds"] = gr.Markdown(first.rounds, elem_classes=["rule-rounds"])
            view["k_chart"] = gr.Plot(first.k_chart, show_label=False, min_width=300)
        gr.Markdown("### Sample: the rule against a classic bug")
        with gr.Row():
            n = gr.Radio([(f"{s:,}", s) for s in SAMPLE_SIZES], value=10_000, label="M, rounds to sample",
                         min_width=200)
            bug = gr.Radio([(words, key) for key, words in BUGS.items()], value="argmax", label="Classic bug",
                           min_width=240)
            sample_b = gr.Button("Sample M times", variant="primary", min_width=180, scale=0)
        summary = gr.Markdown(SAMPLE_INTRO)
        histogram = gr.Plot(visible=False, show_label=False)

    names = ["numbers", "overlap", "rounds", "k_chart"]
    outputs = [view[name] for name in names] + [alert]
    weights = [labels, *ps, *qs]
    marked = [*ps, *qs, k, bad]  # the sliders' message lines, and which one has a message

    def show(result) -> list:
        if isinstance(result, Problem):
            return [gr.skip()] * len(names) + [f"⚠ {result.message}"]
        return [getattr(result, name) for name in names] + [""]

    def on_input(labels_, *values):  # the p sliders, the q sliders, K, then the slider with a message
        result = live(labels_, values[:SLOTS], values[SLOTS:2 * SLOTS], values[2 * SLOTS])
        messages, now = slider_messages(result, labels_, values[-1])
        return show(result) + messages + [now]

    stale = [SAMPLE_INTRO, gr.update(value=None, visible=False)]  # a sample of a p and q no longer on show

    def loaded(w: Weights | Problem, k_) -> list:
        if isinstance(w, Problem):
            return [gr.skip()] * (2 + 3 * SLOTS) + show(w) + [gr.skip()] * 3
        result = live(w.labels, w.p, w.q, k_)  # the weights are good: only K can be wrong, and keeps its message
        return [w.labels, *_slider_updates(w), w.note] + show(result) + stale + [
            "K" if isinstance(result, Problem) else None]

    loaded_outputs = [labels, *rows, *ps, *qs, note] + outputs + [summary, histogram, bad]
    quiet = dict(show_progress="hidden", trigger_mode="always_last")
    for slider in (*ps, *qs, k):  # release: also after the box clamps a typed value on leaving it
        for event in (slider.input, slider.release):
            if slider is k:
                event(on_input, [*weights, k, bad], outputs + marked, **quiet)
            else:
                # a preset's caption is of the q it set: an edited weight leaves it behind
                event(lambda *v: on_input(*v) + stale + [EDITED], [*weights, k, bad],
                      outputs + marked + [summary, histogram, note],
                      **quiet)
    for name, button in buttons.items():
        button.click(lambda labels_, k_, *p_w, name=name: loaded(preset(name, labels_, p_w), k_),
                     [labels, k, *ps], loaded_outputs, show_progress="hidden")
    load_b.click(lambda s, at, k_: loaded(from_round(s, at), k_), [session, picker, k], loaded_outputs,
                 show_progress="hidden")

    def fill_picker(s):
        choices, default = round_positions(s)
        return gr.update(choices=choices, value=default)
    tab.select(fill_picker, session, picker, show_progress="hidden")

    def on_sample(labels_, n_, bug_, *values):
        result = sample(labels_, values[:SLOTS], values[SLOTS:], n_, bug_)
        if isinstance(result, Problem):
            return f"⚠ {result.message}", gr.skip()
        return result.summary, gr.update(value=result.histogram, visible=True)
    sample_b.click(on_sample, [labels, n, bug, *ps, *qs], [summary, histogram])
