"""Tier 1 of the app tests: the handlers, the step-through and the views as plain functions, on
tiny random models (no real models, no browser)."""
from __future__ import annotations

import json
import re
from dataclasses import fields

import pytest

import tiny
from specdec import DecodeConfig, Generation, ModelChoice, SamplingConfig, TraceFile
from specdec.render import TOKEN_KINDS, PHASE_NAMES, ROW_HEADERS, first_difference, output_text, segments, theory_tokens_per_round
from specdec.trace import PHASES, REJECTED, RESAMPLED
from specdec_ui import charts
from specdec_ui import handlers as h
from specdec_ui.state import APP_PROMPT_TOKENS, FORM, FIELD_LABELS, Loader, Session, Walkthrough, form_defaults
from specdec_ui.views import CompareView, Problem, RunView, StepView, plain_html, token_html

PROMPT = "w1 w2 w3 w4 w1 w2 w3"


def form(**kw) -> dict:
    """The app's form; confidence 0: every round drafts exactly K."""
    return {**form_defaults(), "prompt": PROMPT, "k": 4, "confidence": 0.0, "temperature": 1.0,
            "max_new_tokens": 16, **kw}


@pytest.fixture(scope="module")
def pair():
    return tiny.pair(tiny.model(1, scale=4), tiny.model(2, scale=4))


@pytest.fixture()
def loader(pair):
    return Loader(ModelChoice.of(pair), pair)


def step(loader, action, session, values):
    """The step handler's last view (it first yields a waiting view when the models are busy)."""
    return list(h.step(loader, action, session, values))[-1]


def generation(pair, seed=0, temperature=1.0, drafter="model", top_k=0, top_p=1.0):
    cfg = DecodeConfig(max_new_tokens=24, k=4, seed=seed, sampling=SamplingConfig(temperature, top_k, top_p))
    return Generation.from_prompt(pair, PROMPT, cfg, drafter).run()


def shown_tokens(html: str) -> list[tuple[str, str]]:
    """(kind, text) of every token element of a token view."""
    import html as html_lib
    return [(kind, html_lib.unescape(text)) for kind, text in
            re.findall(r'<(?:span|del) class="tok tok-(\w+)"[^>]*>(.*?)</(?:span|del)>', html, re.S)]


@pytest.mark.parametrize("seed,temperature,drafter,top_k,top_p", [
    (0, 1.0, "model", 0, 1.0), (1, 1.0, "model", 0, 1.0), (2, 0.7, "model", 8, 0.9), (3, 0.0, "model", 0, 1.0),
    (4, 1.0, "lookup", 0, 1.0), (5, 1.0, "none", 0, 1.0)])
def test_labels_cover_the_output_text_exactly(pair, seed, temperature, drafter, top_k, top_p):
    gen = generation(pair, seed, temperature, drafter, top_k, top_p)
    segs = segments(gen.rounds)
    assert output_text(segs) == gen.text
    assert {s.label for s in segs} <= set(TOKEN_KINDS)
    pieces = [p for r in gen.rounds for p in r.pieces if p]
    assert [s.text for s in segs if s.label != REJECTED] == pieces
    if drafter == "none":  # nothing drafted: every token is the verifier's own, never a "bonus"
        assert {s.label for s in segs} == {"plain"}


def test_rejected_tokens_are_marked_struck_through_and_not_part_of_the_output(pair):
    gen = generation(pair, seed=1)
    segs = segments(gen.rounds)
    rejected = [i for i, s in enumerate(segs) if s.label == REJECTED]
    assert rejected, "this seed should reject some drafts"
    for i in rejected:
        r = gen.rounds[segs[i].round]
        assert segs[i].text == r.positions[r.rejected_at].text and segs[i].position == r.rejected_at
        assert segs[i + 1].label == RESAMPLED and segs[i + 1].round == segs[i].round  # its replacement follows
        assert segs[i].p / segs[i].q < 1
    html = token_html(segs)
    assert html.count("<del ") == len(rejected)  # strike-through by element, not by matching a colour
    assert [(s.label, s.text) for s in segs] == shown_tokens(html)


def test_run_streams_colour_coded_views_and_a_trace(loader):
    session = Session()
    views = list(h.run(loader, session, form(seed=1)))
    final = views[-1]
    assert all(isinstance(v, RunView) for v in views)
    assert final.status.startswith("Finished") and final.download and all(v.download is None for v in views[:-1])
    trace = json.loads(open(final.download, encoding="utf-8").read())
    assert len(views) == len(trace["rounds"]) + 2  # the prefill, one view per round, then the final one
    shown = shown_tokens(final.text)
    assert "".join(t for kind, t in shown if kind != REJECTED) == trace["text"]
    assert any(kind == REJECTED for kind, _ in shown)
    assert 'title="' in final.text and "round 1, position 1" in final.text  # numbers on hover
    assert final.text.count('tabindex="0"') == len(shown)                    # every token reachable by keyboard
    assert "tok/s** = " in final.stats and "verifier passes** = one per round + one over the prompt" in final.stats
    assert "= drafts kept / drafted = " in final.stats and "= drafts kept / tested = " in final.stats


def test_charts_get_the_right_series(pair):
    rounds = generation(pair, seed=1).rounds
    drafted = sum(r.drafted for r in rounds)
    ratio = charts.ratio_figure(rounds)
    bars = [t for t in ratio.data if t.type == "bar"]
    names = ["kept (u ≤ p/q)", "rejected (u > p/q)", "not tested (after a rejection)"]
    assert [t.name for t in bars] == [n for n in names if n in {t.name for t in bars}][:len(bars)]
    assert names[:2] == [t.name for t in bars][:2]  # one trace, one legend entry, per verdict
    assert sum(len(t.y) for t in bars) == drafted and all(0 <= y <= 1 for t in bars for y in t.y)
    draws = next(t for t in ratio.data if t.name == "draw u")
    assert len(draws.y) == sum(r.n_accepted + (r.rejected_at is not None) for r in rounds)  # tested positions only
    assert ratio.layout.xaxis.title.text and ratio.layout.yaxis.title.text
    timing = charts.timing_figure(rounds)
    assert [t.name for t in timing.data] == [PHASE_NAMES[p] for p in PHASES]
    assert all(len(t.y) == len(rounds) for t in timing.data) and timing.layout.barmode == "stack"
    acc = charts.acceptance_figure(rounds)
    assert [t.name for t in acc.data] == ["drafts kept", "drafts not kept", "running a = kept / tested"]
    assert list(acc.data[0].y) == [r.n_accepted for r in rounds]  # one colour per legend entry
    assert [a + b for a, b in zip(acc.data[0].y, acc.data[1].y)] == [r.drafted for r in rounds]
    assert isinstance(acc.data[0].marker.color, str) and 0 <= acc.data[2].y[-1] <= 1
    tokens = charts.tokens_per_round_figure(rounds)
    n = sum(len(r.emitted) for r in rounds)
    assert tokens.data[0].name.startswith("theory") and tokens.data[1].y[-1] == pytest.approx(n / len(rounds))
    race = charts.race_figure({"a": rounds, "b": rounds[:2]})
    assert [t.name for t in race.data] == ["a", "b"] and race.data[0].y[-1] == n
    bonus = next(r for r in rounds if r.rejected_at is None)
    assert len(charts.distribution_figure(bonus).data) == 1     # p for the bonus token


def test_the_distribution_chart_puts_p_q_and_the_residual_on_one_token_axis(pair):
    rounds = generation(pair, seed=1).rounds
    r = next(r for r in rounds if r.rejected_at is not None)
    pos = r.positions[r.rejected_at]
    fig = charts.distribution_figure(r)
    p, q, residual = fig.data
    assert (p.name, q.name) == ("p (verifier)", "q (draft)") and residual.name.startswith("residual")
    assert list(p.x) == list(q.x) == list(residual.x)                       # one shared axis
    assert charts._label(pos.text) in p.x                                   # the drafted x is always on it
    i = list(p.x).index(charts._label(pos.text))
    assert q.y[i] == pytest.approx(pos.q) and p.y[i] == pytest.approx(pos.p)
    assert fig.layout.shapes and "drafted x" in fig.layout.annotations[0].text   # and highlighted
    assert f"β = Σ min(p, q) = {pos.beta:.2f}" in fig.layout.title.text
    expected = [max(0.0, c.p - c.q) / (1 - pos.beta) for c in pos.candidates]
    assert list(residual.y) == pytest.approx(expected)


def test_theory_curve_and_first_difference():
    assert theory_tokens_per_round(0.0, 4) == 1.0
    assert theory_tokens_per_round(1.0, 4) == 5.0
    assert theory_tokens_per_round(0.5, 1) == pytest.approx(1.5)
    assert first_difference([1, 2, 3], [1, 2, 3]) is None
    assert first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert first_difference([1, 2], [1, 2, 3]) == 2


def test_walkthrough_is_a_pure_state_machine(pair):
    r1, r2 = generation(pair, seed=1).rounds[:2]
    w = Walkthrough()
    assert w.needs_round("draft") and w.needs_round("step") and not w.needs_round("reset")
    w, said = w.press("draft", r1)
    assert (w.shown, w.phase, w.rounds, said) == (r1, "draft", (), "")
    assert not w.needs_round("verify") and not w.needs_round("draft") and w.needs_round("next")
    again, said = w.press("draft")
    assert again == w and "already drafted" in said
    w, _ = w.press("verify")
    assert w.phase == "verify" and w.rounds == ()
    w, said = w.press("next", r2)
    assert (w.rounds, w.shown, w.phase, said) == ((r1,), r2, "draft", "Round 1 committed. ")
    w, _ = w.press("step")
    assert (w.rounds, w.phase) == ((r1, r2), "commit") and w.needs_round("step")
    done, said = w.press("step", None, "eos")
    assert done.rounds == (r1, r2) and done.shown is None and "finished (eos)" in said
    assert w.press("reset")[0] == Walkthrough()


def test_step_through_reveals_a_round_in_phases(loader):
    s = Session()
    drafted = step(loader, "draft", s, form(seed=1))
    assert list(drafted.table.columns) == ROW_HEADERS[:3]  # tokens and q only
    assert drafted.ratio is None and shown_tokens(drafted.text) == []
    assert "computed this whole round when it was drafted" in drafted.status and drafted.banner == ""
    verified = step(loader, "verify", s, form(seed=1))
    assert list(verified.table.columns) == ROW_HEADERS and len(verified.table) == 4
    assert verified.ratio is not None and verified.dist is not None
    assert "Verifier KV cache" in verified.cache and "**Verify.**" in verified.explain
    nxt = step(loader, "next", s, form(seed=1))
    assert "Round 1 committed" in nxt.status and shown_tokens(nxt.text)
    assert output_text(segments(list(s.walk.rounds))) == "".join(
        t for kind, t in shown_tokens(nxt.text) if kind != REJECTED)
    again = step(loader, "draft", s, form(seed=1))
    assert "already drafted" in again.status and s.walk.phase == "draft"
    stepped = step(loader, "step", s, form(seed=1))  # finishes the drafted round 2
    assert len(s.walk.rounds) == 2 and not s.walk.pending and "**Commit.**" in stepped.explain
    assert "Round 2: drafted, verified and committed." in stepped.status
    changed = step(loader, "step", s, form(seed=2, k=3))
    assert changed.status.startswith("K (drafted tokens per round), Seed changed: the step-through restarted from "
                                     "the prompt (2 rounds on show discarded)") and len(s.walk.rounds) == 1
    step(loader, "reset", s, form(seed=2))
    assert s.walk == Walkthrough()


def test_step_reaches_the_end_and_says_so(loader):
    s = Session()
    for _ in range(20):
        view = step(loader, "step", s, form(max_new_tokens=3))
    assert "finished" in view.status
    assert sum(len(r.emitted) for r in s.walk.rounds) <= 3


@pytest.mark.parametrize("field,value", [
    ("k", 0), ("k", 33), ("k", None), ("k", 2.5), ("temperature", -1.0), ("temperature", 1e-45), ("top_k", -1),
    ("top_p", 0.0), ("top_p", 1.5), ("seed", -1), ("max_new_tokens", 0), ("max_new_tokens", 3.5), ("prompt", "  "),
    ("drafter", "oracle"), ("confidence", 1.0)])
def test_invalid_settings_give_a_message_in_the_words_on_the_screen_and_change_nothing_else(loader, field, value):
    s = Session()
    step(loader, "step", s, form())
    before = s.walk
    bad = form(**{field: value})
    for result in (step(loader, "step", s, bad), *h.run(loader, s, bad), *h.compare(loader, s, bad)):
        assert isinstance(result, Problem) and result.field == field
        assert result.message.startswith(FIELD_LABELS[field]) and "(got None)" not in result.message
    assert s.walk == before
    assert isinstance(step(loader, "step", s, form()), StepView)  # still usable


def test_messages_name_the_label_say_empty_and_refuse_fractions(loader):
    empty = step(loader, "step", Session(), form(k=None))
    assert empty.message == "K (drafted tokens per round) is empty: enter an integer in [1, 32]."
    half = step(loader, "step", Session(), form(k=2.5))
    assert half.message == "K (drafted tokens per round) must be a whole number (got 2.5)."
    assert isinstance(step(loader, "step", Session(), form(k=3.0)), StepView)  # 3.0 is the integer 3


def test_the_app_limits_the_prompt_well_under_the_context(loader, monkeypatch):
    import specdec_ui.state
    assert APP_PROMPT_TOKENS == 2048  # the real pair's context is 32768
    monkeypatch.setattr(specdec_ui.state, "APP_PROMPT_TOKENS", 16)  # the tiny models hold only 256 positions
    problem = step(loader, "step", Session(), form(prompt=" ".join(["w1"] * 17)))
    assert problem.field == "prompt" and problem.message.startswith(
        "Prompt must be at most 16 tokens in the app, which shares its models with every browser session (got 17")
    assert isinstance(step(loader, "step", Session(), form(prompt=" ".join(["w1"] * 16))), StepView)
    too_long = step(loader, "step", Session(), form(prompt=" ".join(["w1"] * 300)))
    assert too_long.field == "prompt" and too_long.message.startswith("Prompt must be")


def test_handlers_wait_for_the_models():
    loading = Loader(ModelChoice("embedded:none", None))
    assert step(loading, "draft", Session(), form()) == Problem(h.NOT_READY)
    assert list(h.run(loading, Session(), form())) == [Problem(h.NOT_READY)]


def test_loader_reports_a_bad_setting_instead_of_raising():
    loader = Loader(ModelChoice("embedded:none", None, device="quantum")).load_in_background().wait(30)
    assert loader.pair is None and "device" in loader.error


def test_stop_ends_a_run_cleanly_and_idle_stop_says_so(loader):
    s = Session()
    assert h.stop(s) == "Nothing is running."
    run = h.run(loader, s, form(max_new_tokens=64))
    assert next(run).status.startswith("Reading the prompt")
    first = next(run)
    assert h.stop(s).startswith("Stopping")
    rest = list(run)
    assert rest[-1].status == "Stopped after 1 rounds." and rest[-1].text == first.text and rest[-1].download
    assert h.stop(s) == "Nothing is running."
    assert isinstance(step(loader, "step", s, form()), StepView)  # the session carries on


def test_trace_round_trip_replays_without_models(loader, tmp_path):
    final = list(h.run(loader, Session(), form(seed=3)))[-1]
    raw = open(final.download, encoding="utf-8").read()
    trace = TraceFile.from_json(raw)
    assert json.loads(json.dumps([r.to_dict() for r in trace.rounds])) == json.loads(raw)["rounds"]
    replayed = h.replay(Session(), final.download)
    assert (replayed.text, replayed.stats) == (final.text, final.stats)
    assert replayed.timing == final.timing and replayed.status.startswith("Replayed a trace of")
    garbage = tmp_path / "x.json"
    for content in ('{"rounds": 3}', "not json", '{"format": 1, "rounds": []}'):
        garbage.write_text(content)
        problem = h.replay(Session(), str(garbage))
        assert isinstance(problem, Problem) and "not a specdec trace" in problem.message
        assert problem.field == "upload" and problem.message.endswith("The view above is unchanged.")


def test_compare_at_temperature_zero_shows_the_identical_badge(loader):
    final = list(h.compare(loader, Session(), form(temperature=0.0, max_new_tokens=12)))[-1]
    assert isinstance(final, CompareView)
    assert "Identical output" in final.badge and final.base_text == final.spec_text != plain_html("")
    assert "Speedup" in final.badge and len(final.race.data) == 2
    sampled = list(h.compare(loader, Session(), form(temperature=1.0, max_new_tokens=8)))[-1]
    assert "differ by design" in sampled.badge


def test_the_page_is_built_from_the_view_records(pair):
    from specdec_ui.layout import build_demo
    demo = build_demo(Loader(ModelChoice.of(pair), pair))  # asserts every view field has its component
    assert demo.title == "Speculative decoding"
    assert tuple(form_defaults()) == FORM
    d = DecodeConfig()
    assert (form_defaults()["k"], form_defaults()["max_new_tokens"]) == (d.k, d.max_new_tokens)
    for record in (StepView, RunView, CompareView):
        assert fields(record)


def test_a_session_says_when_it_waits_for_another_sessions_round(loader, pair):
    import threading
    s = Session()
    pair.lock.acquire()  # another session's round is in progress
    try:
        views = h.step(loader, "step", s, form())
        assert next(views).status == h.WAITING
        threading.Timer(0.3, pair.lock.release).start()
        final = next(views)
    finally:
        if pair.lock.locked():
            pair.lock.release()
    assert final.status.startswith("Round 1: drafted, verified and committed")
    assert s.gen.waited_s >= 0.2 and s.gen.rounds[0].times.total < s.gen.waited_s + 1  # waiting is not compute


def test_temperature_zero_says_the_rule_has_nothing_to_decide(loader):
    view = step(loader, "verify", Session(), form(temperature=0.0))
    assert view.banner.startswith("**Temperature 0: the rule has nothing to decide.**")
    assert "u" in view.table.data.columns and "color: #6b7280" in view.table.to_html()  # u greyed out
    assert step(loader, "verify", Session(), form(temperature=0.8)).banner == ""


def test_text_keeps_its_shape_with_visible_whitespace_that_is_never_copied(pair):
    from specdec.render import Segment
    segs = [Segment("def", "accepted", 0, 0, 0.9, 0.9), Segment("\n", "accepted", 0, 1, 0.9, 0.9),
            Segment("    ", "bonus", 0, 2, 0.9), Segment("return", "resampled", 1, 0, 0.5)]
    html = token_html(segs)
    assert '<span class="nl"></span>\n' in html and html.count('<span class="sp"> </span>') == 4  # marked, kept
    assert "return" in html and 'class="spec-tokens"' in html
    plain = plain_html("a b\n\tc")
    assert plain == '<pre class="spec-plain">a<span class="sp"> </span>b<span class="nl"></span>\n' \
                    '<span class="tab">\t</span>c</pre>'
