"""The Run tab as plain functions on tiny random models (no real models, no browser): a run streamed as it goes
and then shown whole, its charts, Stop, its trace downloaded and replayed, and the worker that pulls its
rounds one at a time on the shared models."""
from __future__ import annotations

import json
import re
import threading

import pytest
from helpers.ui import (
    PROMPT,
    form,
    generation,
    shown_tokens,
    step,
    tree_form,
    visible_text,
)

from specdec import DecodeConfig, ModelChoice, TraceFile
from specdec.decode.start import start
from specdec.teach.render import PHASE_NAMES, plural
from specdec.trace import PHASES, REJECTED
from specdec_ui import charts, views
from specdec_ui.state import FORM, Loader, Session, Worker
from specdec_ui.tabs import run as run_tab
from specdec_ui.tabs.run import RunView
from specdec_ui.tabs.step import StepView
from specdec_ui.views import UNCHANGED, Problem


def test_run_streams_live_views_then_a_full_one_with_a_trace(loader, monkeypatch):
    monkeypatch.setattr(views, "REFRESH_S", 0.01)
    session = Session()
    shown = list(run_tab.run(loader, session, form(seed=1, max_new_tokens=24)))
    final = shown[-1]
    assert all(isinstance(v, RunView) for v in shown) and len(shown) >= 2
    assert final.status.startswith("Finished") and final.download and all(v.download is None for v in shown[:-1])
    assert shown[0].ratio is None and shown[0].stats == ""  # the first view clears the previous run's
    for live in shown[1:-1]:  # the page keeps its charts while the run goes; the live HTML charts stand in
        assert live.ratio == live.timing == live.stats == UNCHANGED and "aria-label=\"round" not in live.text
    assert final.live == "" and final.ratio is not None and final.timing is not None
    trace = json.loads(open(final.download, encoding="utf-8").read())
    assert visible_text(final.text) == trace["text"] and any(k == REJECTED for k, _ in shown_tokens(final.text))
    assert "round 1, position 1" in final.text                                  # each token's story, at the end
    assert final.text.count('tabindex="0"') == len(shown_tokens(final.text))   # every token reachable by keyboard
    assert "tok/s** decoding = " in final.stats and "verifier passes** = one per round + one over the prompt" in final.stats
    assert "prefill (reading the prompt" in final.stats and "vary by tens of percent" in final.stats
    # what other processes (the browser among them) took of the cores while it ran, when the run lasted long enough
    shared = re.search(r"other processes used (\d+)% of this machine's (\d+) cores", final.stats)
    assert shared is None or 0 <= int(shared.group(1)) <= 100


def test_the_cores_other_processes_used_are_measured_and_said(pair):
    import time

    from specdec_ui.state import CpuShare
    from specdec_ui.tabs.run import run_view
    share = CpuShare()
    assert share.others() is None                      # too short an interval to say anything
    stop = time.perf_counter() + 0.8

    def spin():                                        # this process's own work is not "other"
        while time.perf_counter() < stop:
            pass
    worker = threading.Thread(target=spin)
    worker.start()
    worker.join()
    others = share.others()
    assert others is not None and 0.0 <= others <= 1.0
    rounds = generation(pair, seed=1).rounds
    stats = run_view(list(rounds), 0.1, "Finished.", others=0.123).stats
    assert "other processes used 12% of this machine's" in stats and "python -m specdec generate" in stats
    assert "other processes" not in run_view(list(rounds), 0.1, "Finished.").stats


def test_the_live_charts_show_tested_positions_only(pair):
    rounds = generation(pair, seed=1).rounds
    live = charts.live_html(rounds)
    tested = sum(r.tested for r in rounds)
    assert live.count('class="v-accepted"') + live.count('class="v-rejected"') == min(tested, 120)
    assert live.count("<a style=") == len(rounds) and "tallest" in live
    race = charts.race_html([("verifier only", rounds), ("speculative", rounds[:2])])
    assert race.count("race-row") == 2 and f"{sum(len(r.emitted) for r in rounds)} tokens" in race


def test_charts_get_the_right_series(pair):
    rounds = next(g.rounds for g in (generation(pair, seed) for seed in range(1, 20))
                  if any(p.status == "unreached" for r in g.rounds for p in r.positions))
    tested = sum(r.tested for r in rounds)
    untested = sum(p.status == "unreached" for r in rounds for p in r.positions)
    assert untested, "this seed should leave drafts untested"
    ratio = charts.ratio_figure(rounds)
    bars = [t for t in ratio.data if t.type == "bar"]
    assert [t.name for t in bars] == ["kept (u ≤ p/q)", "rejected (u > p/q)"]  # one trace per verdict
    assert sum(len(t.y) for t in bars) == tested and all(0 <= y <= 1 for t in bars for y in t.y)
    draws = next(t for t in ratio.data if t.name == "draw u")
    assert len(draws.y) == tested                                               # tested positions only
    grey = next(t for t in ratio.data if t.name == "not tested")
    assert len(grey.x) == untested and all("not tested" in t for t in grey.hovertext)
    assert not any("p/q = 0" in (t.name or "") for t in ratio.data if len(t.x) and set(t.x) <= set(grey.x))
    timing = charts.timing_figure(rounds)
    assert [t.name for t in timing.data] == [PHASE_NAMES[p] for p in PHASES]
    assert all(len(t.y) == len(rounds) for t in timing.data) and timing.layout.barmode == "stack"
    acc = charts.acceptance_figure(rounds)
    assert [t.name for t in acc.data] == ["drafts kept", "drafts not kept", "running a = kept / tested"]
    assert list(acc.data[0].y) == [r.n_accepted for r in rounds]
    assert [a + b for a, b in zip(acc.data[0].y, acc.data[1].y)] == [r.drafted for r in rounds]
    assert acc.data[2].y[-1] == pytest.approx(sum(r.n_accepted for r in rounds) / tested)
    tokens = charts.tokens_per_round_figure(rounds)
    n = sum(len(r.emitted) for r in rounds)
    assert tokens.data[0].name.startswith("theory") and tokens.data[1].y[-1] == pytest.approx(n / len(rounds))
    race = charts.race_figure([("verifier only", "verifier only", rounds), ("speculative", "speculative", rounds[:2])])
    assert [t.name for t in race.data] == ["verifier only", "speculative"] and race.data[0].y[-1] == n
    bonus = next(r for r in rounds if r.rejected_at is None)
    assert len(charts.distribution_figure(bonus).data) == 1     # p for the bonus token


def test_stop_ends_a_run_cleanly_and_idle_stop_says_so(loader, monkeypatch):
    monkeypatch.setattr(views, "REFRESH_S", 0.01)
    s = Session()
    assert views.stop(s) == "Nothing is running."
    run = run_tab.run(loader, s, form(max_new_tokens=200))
    assert next(run).status.startswith("Reading the prompt")
    assert next(run).status.startswith("Round ")  # the run goes on in its worker; the page follows
    assert views.stop(s).startswith("Stopping")
    rest = list(run)
    assert rest[-1].status.startswith("Stopped after ") and rest[-1].download
    trace = json.loads(open(rest[-1].download, encoding="utf-8").read())
    assert trace["stop_reason"] == "cancelled" and len(trace["text"]) and rest[-1].status == \
        f"Stopped after {plural(len(trace['rounds']), 'round', 'rounds')}."
    assert views.stop(s) == "Nothing is running."
    assert isinstance(step(loader, "step", s, form()), StepView)  # the session carries on


def test_trace_round_trip_replays_without_models_and_restores_the_settings(loader, tmp_path):
    f = form(seed=3, k=3, temperature=0.9, draft_noise=0.1)
    final = list(run_tab.run(loader, Session(), f))[-1]
    raw = open(final.download, encoding="utf-8").read()
    trace = TraceFile.from_json(raw)
    assert json.loads(json.dumps([r.to_dict() for r in trace.rounds])) == json.loads(raw)["rounds"]
    s = Session()
    replayed = run_tab.replay(s, final.download)
    # the same numbers, but for the share of the cores others used: the live run measured it, a replay cannot
    live_stats = re.sub(r"\n\* \*\*other processes used .*? measures the difference\)", "", final.stats)
    assert (replayed.view.text, replayed.view.stats) == (final.text, live_stats)
    assert replayed.view.timing == final.timing and replayed.view.status.startswith("Replayed a trace of")
    assert replayed.form == {k: f[k] for k in replayed.form} and set(replayed.form) == set(FORM)
    # the step-through replays the trace round by round, with no models at all
    offline = Loader(ModelChoice("embedded:none", None))
    v = step(offline, "step", s, replayed.form)
    assert isinstance(v, StepView) and v.status.startswith("Replaying the uploaded trace (no models run)")
    assert s.walk.rounds == trace.rounds[:1]
    for _ in range(len(trace.rounds)):
        v = step(offline, "step", s, replayed.form)
    assert s.walk.rounds == trace.rounds and visible_text(v.text) == trace.text
    assert "finished" in step(offline, "step", s, replayed.form).status
    # changing a setting leaves the replay for a live run (here: no models, so it says so)
    assert step(offline, "step", s, {**replayed.form, "seed": 99}) == Problem(views.NOT_READY)


@pytest.mark.parametrize("content,said", [
    ('{"rounds": 3}', "not a specdec trace"), ("not json", "not a specdec trace"),
    ('{"format": 1, "rounds": []}', "not a specdec trace"), ("[" * 100_000 + "]" * 100_000, "not a specdec trace"),
    (b"\xff\xfe\x00binary", "not UTF-8 text")])
def test_a_file_that_is_not_a_trace_is_refused_and_nothing_changes(tmp_path, content, said):
    garbage = tmp_path / "x.json"
    garbage.write_bytes(content if isinstance(content, bytes) else content.encode())
    s = Session()
    problem = run_tab.replay(s, str(garbage))
    assert isinstance(problem, Problem) and said in problem.message and problem.message.startswith("x.json: ")
    assert problem.field == "upload" and problem.message.endswith("The view above is unchanged.")
    assert s.replay is None and run_tab.replay(s, None) is None


@pytest.mark.parametrize("path,value,said", [
    (("positions", 0, "p"), "0.5", "rounds[0].positions[0].p must be a number in [0, 1] (got '0.5')"),
    (("positions", 0, "q"), 1.5, "rounds[0].positions[0].q must be a number in [0, 1] (got 1.5)"),
    (("positions", 0, "status"), "maybe", "rounds[0].positions[0].status must be one of"),
    (("positions", 0, "candidates", 0, "token_id"), -3, "candidates[0].token_id must be an integer >= 0"),
    (("next_token", "prob"), [1], "rounds[0].next_token.prob must be a number"),
    (("times", "verify"), None, "rounds[0].times.verify must be a number in [0, inf)"),
    (("target_cache",), [1, 2, 3], "rounds[0].target_cache must be a list of 2"),
    (("emitted", 0), True, "rounds[0].emitted[0] must be an integer >= 0 (got True)"),
    (("pieces", 0), 7, "rounds[0].pieces[0] must be text"),
    (("next_kind",), "free", "rounds[0].next_kind must be one of"),
    (("sneaky",), 1, "rounds[0] has no field 'sneaky'")])
def test_a_trace_with_a_bad_field_is_answered_at_the_upload_box(loader, tmp_path, path, value, said):
    final = list(run_tab.run(loader, Session(), form(temperature=0.9, max_new_tokens=6)))[-1]
    data = json.loads(open(final.download, encoding="utf-8").read())
    where = data["rounds"][0]
    for key in path[:-1]:
        where = where[key]
    where[path[-1]] = value
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data), encoding="utf-8")
    s = Session()
    problem = run_tab.replay(s, str(bad))
    assert isinstance(problem, Problem) and problem.field == "upload" and said in problem.message, problem
    assert s.replay is None


def test_a_bars_label_is_in_the_ink_that_reads_on_it_and_the_right_axis_clears_the_toolbar(pair):
    from specdec.teach.tokenkind import KindCount
    counts = (KindCount("whitespace", 10, 10), KindCount("punctuation", 1, 2), KindCount("keyword", 0, 0))
    for sides in ({"speculative": counts}, {charts.CHAIN: counts, charts.TREE: counts}):
        for bar in charts.kinds_figure(sides).data:
            fills = [charts.on_white(bar.marker.color, o) for o in bar.marker.opacity]
            assert all(charts.contrast(ink, fill) >= 4.5 for ink, fill in zip(bar.insidetextfont.color, fills))
            assert charts.contrast(bar.outsidetextfont.color, "#ffffff") >= 4.5
    rounds = generation(pair).rounds
    assert charts.acceptance_figure(rounds).layout.margin.r >= charts.MODEBAR_PX


def test_a_tree_run_says_nodes_per_round(tree_loader):
    final = list(run_tab.run(tree_loader, Session(), tree_form(seed=1)))[-1]
    assert "nodes drafted per round** on average" in final.stats and "steps down the tree kept / tried" in final.stats
    assert final.tokens.data[0].name.startswith("theory for a chain as deep as each tree")
    assert final.download and visible_text(final.text) == json.loads(open(final.download).read())["text"]


class FakeClock:
    """A clock the test moves by hand; ``read`` is set once someone has read it."""

    def __init__(self):
        self.now, self.read = 0.0, threading.Event()

    def __call__(self) -> float:
        self.read.set()
        return self.now


def test_the_worker_counts_the_wait_for_another_sessions_round_in_no_phase_of_a_round(pair):
    gen = start(pair, PROMPT, DecodeConfig(max_new_tokens=6, k=2), "model")
    clock = FakeClock()
    with pair.lock:                                                  # another session's round holds the models
        worker = Worker([[gen]], clock=clock)
        assert clock.read.wait(60)                                   # the worker has begun to wait
        clock.now = 7.0                                              # seven faked seconds go by
        for _ in range(60_000):                                      # it says so (the page shows WAITING)
            if worker.waiting:
                break
            threading.Event().wait(0.001)
        assert worker.waiting
        assert gen.rounds == []                                      # no round pulled past the lock
    assert worker.wait(60) and worker.error is None and gen.done
    assert worker.waited_s == 7.0 and not worker.waiting             # the faked wait, counted once
    # the engine knows nothing of it: a round's phases and its elapsed time are its own compute
    assert gen.rounds[-1].elapsed == pytest.approx(gen.prefill_s + sum(r.times.total for r in gen.rounds))
    stats = run_tab.run_view(list(gen.rounds), gen.prefill_s, "Finished.", waited_s=worker.waited_s).stats
    assert "; 7.0 s waiting for other sessions' rounds excluded" in stats


def test_a_generation_takes_no_lock_of_its_own_the_apps_worker_does(pair):
    gen = start(pair, PROMPT, DecodeConfig(max_new_tokens=4, k=2), "model")
    with pair.lock:                                                  # held here: a round that took it would wait
        running = threading.Thread(target=gen.run, daemon=True)
        running.start()
        running.join(60)
        assert not running.is_alive() and gen.done                   # the command line's run: one user, no lock


def test_an_adaptive_runs_chart_marks_the_k_each_round_asked_for():
    from helpers import tiny

    from specdec import DecodeConfig, Generation, make_drafter
    from specdec.decode.pacing import Pacer, RoundCosts
    target = tiny.model(3, scale=8)
    pair = tiny.pair(target, tiny.noisy_copy(target, 5, 0.6))
    cfg = DecodeConfig(max_new_tokens=30, k=5, adaptive=True)
    costs = RoundCosts({1: 40.0, 7: 58.0}, draft=12.0, rest=2.0)
    gen = Generation(pair, tiny.prompt_ids(seed=3), cfg, make_drafter("model", pair), pacer=Pacer(costs, 5, timed=False)).run()
    fig = charts.acceptance_figure(gen.rounds)
    asked = next(t for t in fig.data if t.name == "K asked for (adaptive K)")
    drafting = [r for r in gen.rounds if r.plan.k > 0]
    assert list(asked.y) == [r.plan.k for r in drafting] and "asked for" in fig.layout.title.text
    # a plain step (K = 0) has no bar: it gets its own mark above the axis, never empty space
    steps = [t for t in fig.data if t.name == "a plain verifier step (adaptive K: 0)"]
    assert [x for t in steps for x in t.x] == [r.index + 1 for r in gen.rounds if r.plan.k == 0]
    assert all(y > 0 for t in steps for y in t.y)
    n0 = sum(r.plan.k == 0 for r in gen.rounds)
    assert f"{n0} rounds of {len(gen.rounds)} a plain verifier step (K = 0)" in run_tab.summary_markdown(
        gen.summary(), gen.rounds)
    plain = charts.acceptance_figure(Generation(pair, tiny.prompt_ids(seed=3), DecodeConfig(max_new_tokens=10),
                                                make_drafter("model", pair)).run().rounds)
    assert all("adaptive K" not in (t.name or "") for t in plain.data)


def test_an_adaptive_tree_runs_chart_marks_the_most_nodes_each_round_asked_for():
    """A tree's mark is its node budget N, a chain's its K: the drafted nodes' bar never rises above it."""
    from helpers import tiny

    from specdec import Generation, make_drafter
    from specdec.decode.pacing import Pacer, RoundCosts
    from specdec.decode.tree_shape import candidates
    hf = tiny.model(0, scale=4)
    pair = tiny.pair(tiny.lean(hf), tiny.lean(tiny.noisy_copy(hf, 1, 0.0), batch_invariant=False))
    cfg = DecodeConfig(max_new_tokens=40, k=4, adaptive=True, confidence=0.0, ignore_eos=True)
    costs = RoundCosts({1: 40.0, 7: 43.0, 13: 46.0, 25: 52.0}, draft=4.0, rest=2.0, draft_row=0.5)  # rows cheap
    gen = Generation(pair, tiny.prompt_ids(8, seed=11), cfg, make_drafter("tree", pair, cfg=cfg),
                     pacer=Pacer(costs, cfg.k, candidates(cfg), timed=False)).run()
    trees = [r for r in gen.rounds if r.tree is not None]
    assert trees and len(trees) < len(gen.rounds)                     # trees and chains both ran
    fig = charts.acceptance_figure(gen.rounds)
    asked = next(t for t in fig.data if t.name == "drafts asked for (adaptive K)")
    drafting = [r for r in gen.rounds if r.plan.asked > 0]
    assert list(asked.y) == [r.plan.budget if r.tree is not None else r.plan.k for r in drafting]
    assert all(r.drafted <= y for r, y in zip(drafting, asked.y)) and fig.layout.yaxis.range[1] > max(asked.y)
    assert asked.text[drafting.index(trees[0])] == f"a tree, W = {trees[0].tree.width}, N = {trees[0].tree.budget}"
    assert "a tree's N, a chain's K" in fig.layout.title.text
    said = run_tab.summary_markdown(gen.summary(), gen.rounds)
    assert f"{len(trees)} of the {len(gen.rounds)} rounds a tree, each round's shape chosen by Adaptive K" in said


def test_the_confidence_section_replays_the_run_at_the_sliders_threshold(loader, tmp_path):
    """A confidence-0 run shows every tested draft's confidence and its replay at any threshold; the
    slider starts at the run's own threshold, where the replay is the run; a replayed trace shows it too."""
    s = Session()
    final = list(run_tab.run(loader, s, form(seed=2, k=4, confidence=0.0, max_new_tokens=32)))[-1]
    assert final.confidence_box is True and final.confidence is not None and final.replayed is not None
    assert final.threshold["value"] == 0.0
    assert "the run's own threshold: the replay is the run" in final.threshold_text
    tested = sum(r.tested for r in s.confident.rounds if r.drafted)
    assert sum(len(t.x) for t in final.confidence.data[:2]) == tested  # kept and rejected: one point a tested draft
    scatter, curve, text = run_tab.threshold_moved(s, 0.8)
    assert "**At τ = 0.80** (the run drafted at 0.00)" in text and "a prediction" in text
    at = s.confident.replay(0.8)
    assert f"**{at.drafted:.2f} drafted per round**" in text and f"**{at.tokens:.2f} tokens per round**" in text
    assert curve.data[0].x[0] == 0.0 and curve.data[0].x[-1] == 0.99  # every threshold from the run's own up
    assert run_tab.threshold_moved(s, 0.0)[2].startswith("* **At τ = 0.00**")
    # a run at 0.6 replays from 0.6 up, and says why not below
    final = list(run_tab.run(loader, s, form(seed=2, k=4, confidence=0.6, max_new_tokens=24)))[-1]
    assert final.threshold["value"] == 0.6 and "cannot be replayed" in final.threshold_text
    below = run_tab.threshold_moved(s, 0.3)[2]  # below the run's own: said at the top, shown at its own
    assert below.startswith("**τ = 0.30 is below this run's own threshold 0.60**") and "* **At τ = 0.60**" in below
    # the trace replayed: the same section, no models needed
    replayed = run_tab.replay(Session(), final.download)
    assert replayed.view.confidence_box is True and replayed.view.threshold["value"] == 0.6


def test_no_confidence_section_where_nothing_drew_a_confidence(loader):
    s = Session()
    final = list(run_tab.run(loader, s, form(seed=2, k=3, drafter="lookup", max_new_tokens=16)))[-1]
    assert final.confidence_box is False and final.confidence is None and final.threshold_text == ""
    assert run_tab.threshold_moved(s, 0.7)[2].__class__.__name__ != "str"  # nothing to redraw: skipped
