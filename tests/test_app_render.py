"""Tier 1 of the app tests: the handlers and the trace-to-display renderer as plain functions, on tiny
random models (no download, no browser)."""
from __future__ import annotations

import json

import pytest

import app_charts as charts
import app_handlers as h
import tiny
from specdec import GenerationConfig, SamplingConfig, start
from specdec.render import (LABELS, PHASE_NAMES, ROW_HEADERS, first_difference, load_trace, output_text, segments,
                            theory_tokens_per_round)
from specdec.trace import PHASES, REJECTED, RESAMPLED

PROMPT = "w1 w2 w3 w4 w1 w2 w3"


def settings(**kw) -> list:
    """The app's inputs in order: prompt, drafter, K, draft confidence, temperature, top-k, top-p, seed,
    max new tokens. Confidence 0: every round drafts exactly K."""
    s = {"prompt": PROMPT, "drafter": "model", "k": 4, "confidence": 0.0, "temperature": 1.0, "top_k": 0, "top_p": 1.0, "seed": 0,
         "max_new_tokens": 16} | kw
    return list(s.values())


@pytest.fixture(scope="module")
def pair():
    return tiny.pair(tiny.model(1, scale=4), tiny.model(2, scale=4))


@pytest.fixture()
def loader(pair):
    return h.Loader.ready(pair)


def generation(pair, seed=0, temperature=1.0, drafter="model", top_k=0, top_p=1.0):
    cfg = GenerationConfig(max_new_tokens=24, k=4, seed=seed, sampling=SamplingConfig(temperature, top_k, top_p))
    return start(pair, PROMPT, cfg, drafter).run()


@pytest.mark.parametrize("seed,temperature,drafter,top_k,top_p", [
    (0, 1.0, "model", 0, 1.0), (1, 1.0, "model", 0, 1.0), (2, 0.7, "model", 8, 0.9), (3, 0.0, "model", 0, 1.0),
    (4, 1.0, "lookup", 0, 1.0)])
def test_labels_cover_the_output_text_exactly(pair, seed, temperature, drafter, top_k, top_p):
    gen = generation(pair, seed, temperature, drafter, top_k, top_p)
    segs = segments(gen.rounds)
    assert output_text(segs) == gen.text
    assert {s.label for s in segs} <= set(LABELS)
    # every committed, non-empty piece is exactly one non-rejected segment, in order
    pieces = [p for r in gen.rounds for p in r.pieces if p]
    assert [s.text for s in segs if s.label != REJECTED] == pieces


def test_rejected_tokens_are_marked_and_not_part_of_the_output(pair):
    gen = generation(pair, seed=1)
    segs = segments(gen.rounds)
    rejected = [i for i, s in enumerate(segs) if s.label == REJECTED]
    assert rejected, "this seed should reject some drafts"
    for i in rejected:
        r = gen.rounds[segs[i].round]
        assert segs[i].text == r.positions[r.rejected_at].text and segs[i].position == r.rejected_at
        assert segs[i + 1].label == RESAMPLED and segs[i + 1].round == segs[i].round  # its replacement follows
        assert segs[i].p / segs[i].q < 1
    assert output_text(segs) == gen.text


def test_run_streams_colour_coded_views_and_a_trace(loader, tmp_path):
    session = h.Session()
    views = list(h.run(loader, session, *settings(seed=1)))
    final = views[-1]
    assert final["run_status"].startswith("Finished") and final["error"] is None
    with open(final["download"], encoding="utf-8") as f:
        trace = json.load(f)
    assert len(views) == len(trace["rounds"]) + 1  # one view per round, then the final one
    shown = final["run_text"]
    assert "".join(t for t, label in shown if label != REJECTED) == trace["text"]
    assert any(label == REJECTED for _, label in shown)
    detail = h.token_detail(session, 0)["run_detail"]
    assert "round 1, position 1" in detail and "p = " in detail
    assert h.token_detail(session, len(shown)) == {}


def test_charts_get_the_right_series(pair):
    gen = generation(pair, seed=1)
    rounds = gen.rounds
    drafted = sum(r.drafted for r in rounds)
    ratio = charts.ratio_figure(rounds)
    assert [t.type for t in ratio.data] == ["bar", "scatter"]
    assert len(ratio.data[0].y) == len(ratio.data[1].y) == drafted
    assert all(0 <= y <= 1 for y in ratio.data[0].y)
    timing = charts.timing_figure(rounds)
    assert [t.name for t in timing.data] == [PHASE_NAMES[p] for p in PHASES]
    assert all(len(t.y) == len(rounds) for t in timing.data) and timing.layout.barmode == "stack"
    acc = charts.acceptance_figure(rounds)
    assert list(acc.data[0].y) == [r.n_accepted for r in rounds] and len(acc.data[1].y) == len(rounds)
    assert 0 <= acc.data[1].y[-1] <= 1
    tokens = charts.tokens_per_round_figure(rounds)
    assert tokens.data[0].name.startswith("theory") and tokens.data[1].y[-1] == pytest.approx(
        len(gen.token_ids) / len(rounds))
    race = charts.race_figure({"a": rounds, "b": rounds[:2]})
    assert [t.name for t in race.data] == ["a", "b"] and race.data[0].y[-1] == len(gen.token_ids)
    rejected = next(r for r in rounds if r.rejected_at is not None)
    assert len(charts.distribution_figure(rejected).data) == 3  # p, q, residual
    bonus = next(r for r in rounds if r.rejected_at is None)
    assert len(charts.distribution_figure(bonus).data) == 1     # p for the bonus token


def test_theory_curve_and_first_difference():
    assert theory_tokens_per_round(0.0, 4) == 1.0
    assert theory_tokens_per_round(1.0, 4) == 5.0
    assert theory_tokens_per_round(0.5, 1) == pytest.approx(1.5)
    assert first_difference([1, 2, 3], [1, 2, 3]) is None
    assert first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert first_difference([1, 2], [1, 2, 3]) == 2


def test_step_through_reveals_a_round_in_phases(loader):
    s = h.Session()
    drafted = h.step(loader, "draft", s, *settings(seed=1))
    assert list(drafted["step_table"].columns) == ROW_HEADERS[:3]  # tokens and q only
    assert drafted["step_ratio"] is None and drafted["step_text"] == []
    verified = h.step(loader, "verify", s, *settings(seed=1))
    table = verified["step_table"]
    assert list(table.columns) == ROW_HEADERS and len(table) == 4
    assert verified["step_ratio"] is not None and verified["step_dist"] is not None
    assert "Verifier KV cache" in verified["step_cache"] and "**Verify.**" in verified["step_explain"]
    nxt = h.step(loader, "next", s, *settings(seed=1))
    assert "Round 1 committed" in nxt["step_status"] and nxt["step_text"]
    assert output_text(segments(s.committed)) == "".join(t for t, lab in nxt["step_text"] if lab != REJECTED)
    again = h.step(loader, "draft", s, *settings(seed=1))
    assert "already drafted" in again["step_status"] and s.phase == "draft"
    stepped = h.step(loader, "step", s, *settings(seed=1))  # finishes the drafted round 2
    assert len(s.committed) == 2 and s.pending is None and "**Commit.**" in stepped["step_explain"]
    assert "Round 2: drafted, verified and committed." in stepped["step_status"]
    detail = h.token_detail(s, 0, "step")["step_detail"]
    assert detail.startswith(f"**{segments(s.committed)[0].text!r}**") and "round 1, position 1" in detail
    changed = h.step(loader, "step", s, *settings(seed=2))
    assert changed["step_status"].startswith("Settings changed") and len(s.committed) == 1
    h.step(loader, "reset", s, *settings(seed=2))
    assert s.committed == [] and s.pending is None


def test_step_reaches_the_end_and_says_so(loader):
    s = h.Session()
    for _ in range(20):
        view = h.step(loader, "step", s, *settings(max_new_tokens=3))
    assert "finished" in view["step_status"]
    assert sum(len(r.committed) for r in s.committed) <= 3


@pytest.mark.parametrize("field,value,named", [
    ("k", 0, "k"), ("k", 33, "k"), ("k", None, "k"), ("temperature", -1.0, "temperature"),
    ("top_k", -1, "top_k"), ("top_p", 0.0, "top_p"), ("top_p", 1.5, "top_p"), ("seed", -1, "seed"),
    ("max_new_tokens", 0, "max_new_tokens"), ("prompt", "  ", "prompt"), ("drafter", "oracle", "drafter")])
def test_invalid_settings_give_a_message_and_change_nothing_else(loader, field, value, named):
    s = h.Session()
    h.step(loader, "step", s, *settings())
    before = list(s.committed)
    bad = settings(**{field: value})
    for view in (h.step(loader, "step", s, *bad), *h.run(loader, s, *bad), *h.compare(loader, s, *bad)):
        assert set(view) == {"error"} and view["error"].startswith(named)
    assert s.committed == before
    assert h.step(loader, "step", s, *settings())["error"] is None  # still usable


def test_handlers_wait_for_the_models(pair):
    loading = h.Loader("embedded:none", None)
    assert h.step(loading, "draft", h.Session(), *settings()) == {"error": h.NOT_READY}
    assert list(h.run(loading, h.Session(), *settings())) == [{"error": h.NOT_READY}]


def test_loader_reports_a_bad_setting_instead_of_raising():
    loader = h.Loader("embedded:none", None, device="quantum").start()
    loader._thread.join(timeout=30)
    assert loader.pair is None and "device" in loader.error and "failed" in loader.info()


def test_stop_ends_a_run_cleanly(loader):
    s = h.Session()
    run = h.run(loader, s, *settings(max_new_tokens=64))
    first = next(run)
    h.stop(s)
    rest = list(run)
    assert len(rest) == 1 and rest[0]["run_status"] == "Stopped after 1 rounds."
    assert rest[0]["run_text"] == first["run_text"]
    assert h.step(loader, "step", s, *settings())["error"] is None  # the session carries on


def test_trace_round_trip_replays_without_models(loader, tmp_path):
    s = h.Session()
    final = list(h.run(loader, s, *settings(seed=3)))[-1]
    with open(final["download"], encoding="utf-8") as f:
        raw = f.read()
    _, rounds, _ = load_trace(raw)
    assert json.loads(json.dumps([r.to_dict() for r in rounds])) == json.loads(raw)["rounds"]
    replayed = h.replay(h.Session(), final["download"])
    for key in ("run_text", "run_stats"):
        assert replayed[key] == final[key]
    assert replayed["run_timing"] == final["run_timing"]
    garbage = tmp_path / "x.json"
    garbage.write_text('{"rounds": 3}')
    assert "not a specdec trace" in h.replay(h.Session(), str(garbage))["error"]


def test_compare_at_temperature_zero_shows_the_identical_badge(loader):
    views = list(h.compare(loader, h.Session(), *settings(temperature=0.0, max_new_tokens=12)))
    final = views[-1]
    assert "Identical output" in final["badge"] and final["base_text"] == final["spec_text"]
    assert "Speedup" in final["badge"] and len(final["race"].data) == 2
    sampled = list(h.compare(loader, h.Session(), *settings(temperature=1.0, max_new_tokens=8)))[-1]
    assert "differ by design" in sampled["badge"]


def test_build_demo_wires_without_models(pair):
    import app
    demo = app.build_demo(h.Loader.ready(pair))
    assert demo.title == "Speculative decoding"
