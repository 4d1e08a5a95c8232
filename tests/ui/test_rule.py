"""The Rule tab's handlers and the classic bugs it samples, as plain functions (no browser, no real models).

The hand computations are written out: p = (40, 20, 15, 12, 8, 5) / 100 over the example's six tokens."""
from __future__ import annotations

import re
from html import unescape

import gradio as gr
import pytest
import torch
from helpers.ui import form, step

from specdec.teach.experiment import (
    BUGS,
    OTHER,
    emitted,
    exact_emitted,
    lumped,
    overlap,
    sample_rule_and_bug,
    tv_distance,
)
from specdec_ui.state import Session
from specdec_ui.tabs import rule as rt
from specdec_ui.views import Problem

pytestmark = pytest.mark.usefixtures("one_thread")

LABELS, P, Q = rt.EXAMPLE
# preset -> (q's weights, β = Σ min(p, q)), by hand from p = (.40, .20, .15, .12, .08, .05)
HAND = {
    "example": ((25, 30, 10, 15, 5, 15), 0.25 + 0.20 + 0.10 + 0.12 + 0.05 + 0.05),             # 0.77
    "equal": ((40, 20, 15, 12, 8, 5), 1.0),
    "uniform": ((16.7,) * 6, 1 / 6 + 1 / 6 + 0.15 + 0.12 + 0.08 + 0.05),                        # 0.733
    "sharp": ((70, 10, 7.5, 6, 4, 2.5), 0.40 + 0.60 / 2),                                        # (p + top) / 2: 0.70
    "missing": ((0, 20, 15, 12, 8, 5), 0 + 0.20 + 0.15 + 0.12 + 0.08 + 0.05),                    # q = p elsewhere / 0.6
}


def beta_and_acceptance(view) -> tuple[float, float]:
    beta = float(re.search(r"β = Σ min\(p, q\) = ([\d.]+)", view.numbers).group(1))
    accepted = float(re.search(r"Σ q\(x\)·min\(1, p\(x\)/q\(x\)\) = ([\d.]+)", view.numbers).group(1))
    return beta, accepted


@pytest.mark.parametrize("name", list(rt.PRESETS))
def test_each_preset_gives_the_beta_and_acceptance_a_hand_computation_gives(name):
    w = rt.preset(name, LABELS, P)
    q, beta = HAND[name]
    assert w.labels == LABELS and w.p == P and w.q == pytest.approx(q)
    view = rt.live(w.labels, w.p, w.q, 4)
    assert beta_and_acceptance(view) == (pytest.approx(beta, abs=5e-4), pytest.approx(beta, abs=5e-4))
    assert len(view.overlap.data) == (5 if beta == 1 else 6)          # no residual to draw when nothing is rejected


def test_the_table_gives_each_tokens_chance_of_being_kept_and_the_residual():
    view = rt.live(LABELS, P, HAND["example"][0], 4)
    rows = re.findall(r"<tr><th scope='row'>([^<]+)</th>((?:<td>[^<]*</td>)+)</tr>", view.numbers)
    cells = {unescape(label): re.findall(r"<td>([^<]*)</td>", tds) for label, tds in rows}
    # mat: p .40, q .25 -> kept always; floor: .20 / .30 -> 0.667; residual (.15, 0, .05, 0, .03, 0) / .23
    assert cells["'mat'"] == ["0.400", "0.250", "0.250", "1.000", f"{0.15 / 0.23:.3f}"]
    assert cells["'floor'"] == ["0.200", "0.300", "0.200", f"{0.2 / 0.3:.3f}", "0.000"]
    assert cells["'rug'"][3:] == ["1.000", f"{0.03 / 0.23:.3f}"]
    missing = rt.live(LABELS, P, HAND["missing"][0], 4)
    assert "— (q = 0: never drafted)" in missing.numbers


def test_tokens_per_round_follow_e_of_alpha_and_k_with_alpha_held_at_beta():
    view = rt.live(LABELS, P, HAND["example"][0], 4)
    # α = 0.77, K = 4: (1 − 0.77^5) / 0.23 = 0.729322 / 0.23 = 3.171; kept / drafted = 2.171 / 4 = 0.543
    assert "= 3.17 tokens per round** at K = 4" in view.rounds and "= 0.543" in view.rounds
    assert "= 5.00 tokens per round** at K = 4" in rt.live(LABELS, P, P, 4).rounds  # α = 1: K + 1
    k = view.k_chart.data
    assert list(k[0].x) == list(range(1, rt.K_MAX + 1)) and list(k[1].x) == [4]


@pytest.mark.parametrize("p,q,said,field", [
    (P, (0,) * 6, "q (draft) is all zero: give at least one token a q weight above 0", "q"),
    ((0,) * 6, Q, "p (verifier) is all zero", "p"),
    ((None, 20, 15, 12, 8, 5), Q, "p('mat') is empty: enter a weight from 0 to 100.", "p('mat')"),
    (P, (25, 30, float("nan"), 15, 5, 15), "q('sofa') is empty", "q('sofa')"),
    (P, (25, -3, 10, 15, 5, 15), "q('floor') must be a weight from 0 to 100 (got -3).", "q('floor')"),
    ((40, 20, 150, 12, 8, 5), Q, "p('sofa') must be a weight from 0 to 100 (got 150).", "p('sofa')"),
])
def test_bad_weights_give_a_message_naming_the_field(p, q, said, field):
    for result in (rt.live(LABELS, p, q, 4), rt.sample(LABELS, p, q, 10_000, "argmax")):
        assert isinstance(result, Problem) and result.message.startswith(said) and result.field == field


def test_a_bad_sample_size_or_bug_gives_a_message():
    assert rt.sample(LABELS, P, Q, 7, "argmax").field == "n"
    assert rt.sample(LABELS, P, Q, 10_000, "off by one").field == "bug"


def test_presets_act_on_the_p_on_show():
    p = (10.0, 60.0, 30.0)
    assert rt.preset("sharp", ("a", "b", "c"), p).q == (5.0, 80.0, 15.0)                # halfway to all on 'b'
    assert rt.preset("missing", ("a", "b", "c"), p).q == (10.0, 0.0, 30.0)
    assert rt.preset("missing", ("a", "b"), (100.0, 0.0)).q == (0.0, 1.0)          # p one-hot: q on the others
    assert rt.preset("example", ("a", "b", "c"), p).labels == LABELS


def table_cells(view) -> dict[str, list[str]]:
    """The per-token rows of the rule's table: token -> p, q, min(p, q), kept if drafted, residual, as shown."""
    rows = re.findall(r"<tr><th scope='row'>([^<]+)</th>((?:<td>[^<]*</td>)+)</tr>", view.numbers)
    return {unescape(label): re.findall(r"<td>([^<]*)</td>", tds) for label, tds in rows}


# p's on show: the example's; a real position's (its top at 0.858, the rest lumped); uniform; one-hot; nearly one-hot
SOME_P = [P, (85.83, 5.1, 3.2, 2.0, 1.5, 1.0, 0.5, 0.4, 0.3, 0.17), (10.0,) * 6, (0, 0, 100.0, 0, 0, 0),
          (99.9, 0.1, 0, 0, 0, 0)]


@pytest.mark.parametrize("p", SOME_P, ids=["example", "top-0.858", "uniform", "one-hot", "nearly-one-hot"])
@pytest.mark.parametrize("name", [n for n in rt.PRESETS if n != "example"])
def test_each_presets_caption_states_the_numbers_the_table_shows_for_any_p(name, p):
    labels = LABELS if len(p) == 6 else tuple(f"t{i}" for i in range(len(p)))
    w = rt.preset(name, labels, p)
    assert w.labels == labels and w.p == p
    view = rt.live(w.labels, w.p, w.q, 4)
    cells = table_cells(view)
    beta = beta_and_acceptance(view)[0]
    shown = {rt.shown(label): cells[rt.shown(label)] for label in labels}
    top = max(shown, key=lambda t: float(shown[t][0]))                 # p's top token, as the table shows it
    p_top, q_top, kept = shown[top][0], shown[top][1], shown[top][3]
    said = lambda number: number in w.note.replace("*", "")            # noqa: E731
    if name == "equal":
        assert beta == 1.0 and all(c[0] == c[1] for c in shown.values())
    elif name == "uniform":
        over = {t for t, c in shown.items() if float(c[1]) > float(c[0])}
        assert {t for t in shown if f"{t} (" in w.note} == over       # the tokens it over-drafts, by name
        assert said(f"1 − β = {1 - beta:.3f}") if over else beta == 1.0
    elif name == "sharp":
        if float(p_top) < 1.0:                                         # sharper on p's top token, by the numbers
            assert float(q_top) > float(p_top) and said(f"puts {q_top} on p's top token {top}, more than p's {p_top}")
            assert said(f"p/q = {kept}") and said(f"1 − β = {1 - beta:.3f}")
        else:                                                          # nothing is sharper than one-hot
            assert q_top == p_top and "already one-hot" in w.note and beta == 1.0
    else:
        assert kept.startswith("— (q = 0") and said(f"never drafts {top} (q = 0 there, p = {p_top})")
        assert said(f"1 − β = {1 - beta:.3f}") and said(f"the residual puts {shown[top][4]} on {top}")
        assert 1 - beta == pytest.approx(float(p_top), abs=1e-3)      # all of p's top comes from the residual


def test_a_preset_on_a_bad_p_names_the_field():
    problem = rt.preset("sharp", LABELS, (None, 20, 15, 12, 8, 5))
    assert isinstance(problem, Problem) and problem.field == "p('mat')"


# ---- the classic bugs, exactly and sampled ---------------------------------------------------------

# p = (.5, .3, .2), q = (.2, .2, .6): min(p, q) = (.2, .2, .2), β = .6, max(0, p − q) = (.3, .1, 0), mass .4
HAND_P, HAND_Q = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64), torch.tensor([0.2, 0.2, 0.6], dtype=torch.float64)
HAND_OUT = {
    None: (0.5, 0.3, 0.2),                     # min(p, q) + max(0, p − q): p
    # x* = 2 kept with .2 / .6 = 1/3, else the residual (.75, .25, 0)
    "argmax": (2 / 3 * 0.75, 2 / 3 * 0.25, 1 / 3),
    # the residual unscaled (.3, .1, 0) plus its missing β = .6 on the last token it reaches (1): (.3, .7, 0)
    "unnormalised": (0.2 + 0.4 * 0.3, 0.2 + 0.4 * 0.7, 0.2),
    # kept q(x) min(1, q/p) = (.04/.5, .04/.3, .6), the rest 1 − .81333 from norm(max(0, q − p)) = (0, 0, 1)
    "swapped": (0.08, 0.04 / 0.3, 1 - 0.08 - 0.04 / 0.3),
}


@pytest.mark.parametrize("bug", [None, *BUGS])
def test_each_bugs_exact_output_is_the_hand_computed_one_and_only_the_rules_is_p(bug):
    out = exact_emitted(HAND_P, HAND_Q, bug)
    assert torch.allclose(out, torch.tensor(HAND_OUT[bug], dtype=torch.float64), atol=1e-12)
    assert out.sum() == pytest.approx(1.0)
    assert (tv_distance(out, HAND_P) == pytest.approx(0.0, abs=1e-12)) == (bug is None)


@pytest.mark.parametrize("bug", [None, *BUGS])
def test_each_bug_samples_what_its_exact_distribution_says(bug):
    p, q = HAND_P.float(), HAND_Q.float()
    sampled = emitted(p, q, 40_000, torch.Generator().manual_seed(1), bug=bug)
    assert tv_distance(sampled, exact_emitted(p, q, bug)) <= tv_distance(sampled, p) + 0.02
    assert tv_distance(sampled, exact_emitted(p, q, bug)) < 0.015


@pytest.mark.parametrize("preset", ["example", "uniform", "sharp"])
@pytest.mark.parametrize("bug", list(BUGS))
def test_on_the_browser_tests_presets_the_rule_lands_within_the_bound_and_each_bug_outside(preset, bug):
    w = rt.preset(preset, LABELS, P)
    p, q = (torch.tensor(t) / sum(t) for t in (w.p, w.q))
    h = sample_rule_and_bug(LABELS, p, q, 10_000, 0, bug)      # what the tab's Sample button runs (seed 0)
    assert h.tv_correct <= h.noise_bound < h.tv_bug, (h.tv_correct, h.noise_bound, h.tv_bug)
    view = rt.sample(w.labels, w.p, w.q, 10_000, bug)
    assert f"TV from p = **{h.tv_correct:.3f}**, within the bound" in view.summary
    assert f"TV from p = **{h.tv_bug:.3f}**, **outside the bound" in view.summary


def test_the_unnormalised_bug_is_harmless_where_the_residual_has_one_token():
    view = rt.sample(LABELS, P, HAND["missing"][0], 10_000, "unnormalised")  # the residual: p's top token only
    assert "(its exact TV: 0.000)" in view.summary and "happens to emit (almost) p" in view.summary


# ---- the current real round ------------------------------------------------------------------------

def test_the_real_round_preset_loads_a_tested_position_lumped_or_says_there_is_none(loader):
    s = Session()
    none = rt.from_round(s)
    assert isinstance(none, Problem) and none.message.startswith("No real round yet")
    step(loader, "draft", s, form(seed=0))
    assert isinstance(rt.from_round(s), Problem)                        # drafted, not decided: nothing tested yet
    step(loader, "accept", s, form(seed=0))
    choices, default = rt.round_positions(s)
    assert choices and default is not None
    r = s.walk.shown
    for at in (None, *[v for _, v in choices]):
        w = rt.from_round(s, at)
        i = default if at is None else at
        pos = r.positions[i - 1]
        assert 2 <= len(w.labels) <= rt.SLOTS and w.labels[-1] == OTHER and pos.text in w.labels
        assert sum(w.p) == pytest.approx(100, abs=0.01 * len(w.p)) and sum(w.q) == pytest.approx(100, abs=0.01 * len(w.q))
        assert f"round {r.index + 1}, position {i}" in w.note and f"whole vocabulary: {pos.beta:.3f}" in w.note
        beta = beta_and_acceptance(rt.live(w.labels, w.p, w.q, 4))[0]
        # lumped, "other" overlaps as one token: min(Σ p, Σ q) ≥ Σ min(p, q); the weights are rounded to 0.1
        labels, p, q = lumped(pos)
        rounding = 1e-3 * len(w.labels)
        assert beta >= pos.beta - rounding
        if len(labels) <= rt.SLOTS:                                  # every candidate shown: lumped() as it is
            assert w.labels == labels and beta == pytest.approx(overlap(p, q)[3], abs=rounding)


@pytest.mark.parametrize("k", [None, 0, 2.5, 17, True])
def test_a_bad_k_gives_a_message_naming_it(k):
    result = rt.live(LABELS, P, Q, k)
    assert isinstance(result, Problem) and result.field == "K" and result.message.startswith("K must be a whole number")


def test_a_slider_shows_its_own_message_until_it_holds_a_good_weight():
    bad = rt.live(LABELS, P, (25, -3, 10, 15, 5, 15), 4)
    marks, now = rt.slider_messages(bad, LABELS, None)
    names = rt.slider_names(LABELS)
    at = names.index("q('floor')")
    assert now == "q('floor')" and marks[at]["info"] == bad.message and marks[at]["elem_classes"] == ["field-error"]
    assert all(m == gr.skip() for i, m in enumerate(marks) if i != at)   # one message, at its slider
    marks, now = rt.slider_messages(rt.live(LABELS, P, Q, 4), LABELS, "q('floor')")
    assert now is None and marks[at] == gr.update(info=None, elem_classes=[])  # fixed: the message goes
    worse = rt.live(LABELS, P, Q, 40)                                          # another slider's mistake
    marks, now = rt.slider_messages(worse, LABELS, "q('floor')")
    assert now == "K" and marks[-1]["info"] == worse.message and marks[at]["info"] is None
    everything = rt.live(LABELS, (0,) * 6, Q, 4)                             # no one slider: the alert alone
    assert rt.slider_messages(everything, LABELS, None) == ([gr.skip()] * len(names), None)
