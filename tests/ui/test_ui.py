"""Tier 1 of the app tests: the handlers, the step-through and the views as plain functions, on
tiny random models (no real models, no browser)."""
from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import fields, replace
from html import escape

import pytest
from helpers import tiny
from helpers.ui import PROMPT, form, step

from specdec import DecodeConfig, ModelChoice, SamplingConfig, TraceFile
from specdec.decode.start import start
from specdec.teach.render import (
    DASH,
    PHASE_NAMES,
    TOKEN_KINDS,
    first_difference,
    output_text,
    plural,
    segments,
)
from specdec.teach.render_tree import AGAINST, Q_RENORM, R_X, RATIO, TREE_HEADERS
from specdec.trace import PHASES, REJECTED, RESAMPLED
from specdec_ui import charts
from specdec_ui import handlers as h
from specdec_ui.state import (
    APP_PROMPT_TOKENS,
    FIELD_LABELS,
    FORM,
    Loader,
    Session,
    Walkthrough,
    form_defaults,
)
from specdec_ui.tree_views import NAMES
from specdec_ui.views import (
    UNCHANGED,
    CompareView,
    Problem,
    RunView,
    SampleView,
    StepView,
    plain_html,
    token_html,
)


@pytest.fixture()
def loader(pair):
    return Loader(ModelChoice.of(pair), pair)


def generation(pair, seed=0, temperature=1.0, drafter="model", top_k=0, top_p=1.0):
    cfg = DecodeConfig(max_new_tokens=24, k=4, confidence=0.0, seed=seed,
                       sampling=SamplingConfig(temperature, top_k, top_p))
    return start(pair, PROMPT, cfg, drafter).run()


def shown_tokens(html: str) -> list[tuple[str, str]]:
    """(kind, text) of every token element of a token view (a rejected draft's text is inside it)."""
    import html as html_lib
    return [(kind, html_lib.unescape(re.sub(r"<[^>]+>", "", text))) for kind, text in re.findall(
        r'<(?:span|del) class="tok tok-(\w+)"[^>]*>(.*?)</(?:span|del)>(?=<(?:span|del) class="tok |</div>)', html,
        re.S)]


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


def visible_text(html: str) -> str:
    """What a reader sees of a token view, rejected drafts as markers, as text: every element but
    the ``<del>`` drafts, tags dropped, entities decoded."""
    import html as html_lib
    kept = re.sub(r"<del [^>]*>.*?</del>", "", html, flags=re.S)
    return html_lib.unescape(re.sub(r"<[^>]+>", "", kept))


def test_rejected_drafts_sit_at_the_boundary_they_lost_and_add_nothing_to_the_text(pair):
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
    drafts = re.findall(r'<del class="tok tok-rejected" tabindex="0" aria-label="([^"]*)"><span class="rej-text">'
                        r'(.*?)</span></del>', html, re.S)
    assert len(drafts) == html.count("<del ") == len(rejected)  # struck by element, not by matching a colour
    for (story, _), i in zip(drafts, rejected):  # the marker's story: the draft's text and why it is not there
        assert story.startswith(escape(repr(segs[i].text), quote=True)) and "the token after it took its place" in story
    assert [s.label for s in segs] == [kind for kind, _ in shown_tokens(html)]
    assert visible_text(html) == gen.text


def test_run_streams_live_views_then_a_full_one_with_a_trace(loader, monkeypatch):
    monkeypatch.setattr(h, "REFRESH_S", 0.01)
    session = Session()
    views = list(h.run(loader, session, form(seed=1, max_new_tokens=24)))
    final = views[-1]
    assert all(isinstance(v, RunView) for v in views) and len(views) >= 2
    assert final.status.startswith("Finished") and final.download and all(v.download is None for v in views[:-1])
    assert views[0].ratio is None and views[0].stats == ""  # the first view clears the previous run's
    for live in views[1:-1]:  # the page keeps its charts while the run goes; the live HTML charts stand in
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
    import threading
    import time

    from specdec_ui.state import CpuShare
    from specdec_ui.views import run_view
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


def test_first_difference():
    assert first_difference([1, 2, 3], [1, 2, 3]) is None
    assert first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert first_difference([1, 2], [1, 2, 3]) == 2


def test_walkthrough_is_a_pure_state_machine_of_four_phases(pair):
    r1, r2 = generation(pair, seed=1).rounds[:2]
    w = Walkthrough()
    assert w.needs_round("draft") and w.needs_round("step") and not w.needs_round("reset")
    w, said = w.press("draft", r1)
    assert (w.shown, w.phase, w.rounds, said) == (r1, "draft", (), "")
    assert not w.needs_round("verify") and not w.needs_round("draft")
    again, said = w.press("draft")
    assert again == w and "already past Draft: press Verify next" in said
    skipped, said = w.press("accept")  # a phase may be skipped forward, never back
    assert skipped.phase == "accept" and skipped.rounds == ()
    w, _ = w.press("verify")
    assert w.phase == "verify" and w.rounds == ()
    w, _ = w.press("accept")
    assert w.phase == "accept" and w.rounds == () and w.pending
    w, _ = w.press("commit")
    assert (w.rounds, w.phase, w.pending) == ((r1,), "commit", False) and w.needs_round("draft")
    w, _ = w.press("step", r2)
    assert (w.rounds, w.shown, w.phase) == ((r1, r2), r2, "commit")
    done, said = w.press("step", None, "eos")
    assert (done.rounds, done.shown, done.phase) == ((r1, r2), r2, "commit") and "finished (eos)" in said
    assert "round 2 stays on show" in said
    assert w.press("reset")[0] == Walkthrough()


def test_step_through_reveals_a_round_phase_by_phase(loader):
    s = Session()
    f = form(seed=1, temperature=1.0)
    drafted = step(loader, "draft", s, f)
    assert "<th scope=\"col\">conf.</th>" in drafted.table and "p(x)" not in drafted.table  # tokens, q, confidence
    assert drafted.ratio is None and drafted.dist is None and shown_tokens(drafted.text) == []
    assert "**Draft.**" in drafted.explain and ("Drafted K = 4" in drafted.explain or "stopped" in drafted.explain)
    assert "the verifier has not run yet" in drafted.cache and "Next: **Verify**" in drafted.status
    verified = step(loader, "verify", s, f)
    assert "p(x)" in verified.table and "p/q" not in verified.table and verified.ratio is None
    assert "not rolled back yet" in verified.cache and "**Verify.**" in verified.explain
    decided = step(loader, "accept", s, f)
    assert "p/q" in decided.table and "verdict" in decided.table and decided.ratio is not None and decided.dist
    assert "**Accept/reject.**" in decided.explain and shown_tokens(decided.text) == []  # nothing committed yet
    committed = step(loader, "commit", s, f)
    assert "**Commit and roll back.**" in committed.explain and "after the rollback" in committed.cache
    assert output_text(segments(list(s.walk.rounds))) == visible_text(committed.text) != ""
    again = step(loader, "verify", s, f)  # a new round must be drafted first
    assert s.walk.phase == "verify" and len(s.walk.rounds) == 1
    stepped = step(loader, "step", s, f)  # finishes the round on show
    assert len(s.walk.rounds) == 2 and not s.walk.pending and "**Commit and roll back.**" in stepped.explain
    assert again.status.startswith("Round 2")
    changed = step(loader, "step", s, form(seed=2, k=3, temperature=1.0))
    assert changed.status.startswith("K (drafted tokens per round), Seed changed: the step-through restarted from "
                                     "the prompt (2 rounds on show discarded)") and len(s.walk.rounds) == 1
    step(loader, "reset", s, form(seed=2))
    assert s.walk == Walkthrough()


def test_untested_drafts_show_dashes_and_why_never_numbers(loader, pair):
    s = Session()
    for seed in range(20):
        s = Session()
        view = step(loader, "accept", s, form(seed=seed, temperature=1.0))
        r = s.walk.shown
        if r.rejected_at is not None and r.rejected_at < len(r.positions) - 1:
            break
    else:
        pytest.fail("no seed left a draft untested")
    rows = re.findall(r"<tr class=\"row-(\w+)\">(.*?)</tr>", view.table, re.S)
    assert [st for st, _ in rows] == [p.status for p in r.positions]
    for (status, row), pos in zip(rows, r.positions):
        cells = re.findall(r"<td[^>]*>(.*?)</td>", row)
        if status == "unreached":
            assert cells[3:6] == [DASH] * 3 and "not tested: after the rejection" in cells[6]
        else:
            assert DASH not in cells[3:6] and float(cells[4]) == pytest.approx(pos.ratio, abs=1e-3)


def legend(fig) -> list[str]:
    """A chart's legend entries, each up to its first colon."""
    return [t.name.split(":")[0] for t in fig.data if t.showlegend is not False]


def test_the_sample_button_runs_the_rule_on_the_round_on_show(loader):
    s = Session()
    assert isinstance(h.sample(s), Problem)
    for seed in range(10):
        step(loader, "accept", s, form(seed=seed, temperature=1.0))
        if s.walk.shown.tested:
            break
        step(loader, "reset", s, form(seed=seed))
    view = h.sample(s)
    assert isinstance(view, SampleView) and "10,000 times" in view.summary and "total variation" in view.summary
    tv = float(re.search(r"total variation from p = \*\*([\d.]+)", view.summary).group(1))
    bound = float(re.search(r"at most ([\d.]+) here", view.summary).group(1))
    assert tv < 0.03 and legend(view.histogram)[:3] == ["p (verifier)", "the rule", "argmax draft bug"]
    # the TVs on one axis with the bound drawn: the bars are the numbers the text states, the band ends at the bound
    band, bars = view.histogram.data[3:]
    bug = float(re.search(r"The bug.*total variation = \*\*([\d.]+)", view.summary).group(1))
    assert band.name == f"noise bound {bound:.3f}: what sampling alone may give" and max(band.x) == pytest.approx(
        bound, abs=5e-4)
    assert [round(x, 3) for x in bars.x] == [tv, bug] and list(bars.y) == [0, 1]


@pytest.fixture(scope="module")
def close_loader():
    """A draft close to the verifier (a noisy copy): most rounds keep every draft."""
    m = tiny.model(1, scale=4)
    pair = tiny.pair(m, tiny.noisy_copy(m, 1, 0.3))
    return Loader(ModelChoice.of(pair), pair)


def decided_round(loader, want, **kw):
    """A session whose round on show is decided and satisfies ``want(round)``, over the first seeds."""
    for seed in range(30):
        s = Session()
        step(loader, "accept", s, form(seed=seed, **kw))
        if want(s.walk.shown):
            return s
    pytest.fail("no seed gave the round asked for")


def sampled_position(view) -> int:
    return int(re.search(r"position (\d+) \(drafted", view.summary).group(1))


def beyond_the_noise(r) -> dict[int, float]:
    """Per tested position (1-based): by how much the argmax bug's exact TV from p exceeds the noise bound of
    10,000 rounds there, from the engine's own functions."""
    from specdec.teach.experiment import bug_tv, lumped, tv_noise_bound
    return {i + 1: bug_tv(pos) - tv_noise_bound(lumped(pos)[1], h.SAMPLES) for i, pos in enumerate(r.positions)
            if pos.tested}


def test_sample_takes_the_position_where_the_bug_lands_farthest_beyond_the_noise(close_loader):
    from specdec.teach.experiment import bug_tv
    s = decided_round(close_loader, lambda r: sum(p.tested for p in r.positions) == 3, k=3)
    r = s.walk.shown
    excess = beyond_the_noise(r)
    best = max(excess, key=excess.get)
    assert excess[best] > 0                                                   # tiny models: p and q spread out
    view = h.sample(s)
    assert sampled_position(view) == best
    assert (f"the one where the argmax bug lands farthest beyond the noise: exactly {bug_tv(r.positions[best - 1]):.3f} "
            "from p in total variation, against a noise bound of") in view.summary
    bug = float(re.search(r"The bug.*total variation = \*\*([\d.]+)", view.summary).group(1))
    assert bug == pytest.approx(bug_tv(r.positions[best - 1]), abs=0.03)    # sampled, near the exact
    choices, default = h.sample_positions(s)
    assert default == best and [v for _, v in choices] == list(excess)
    labels = dict(map(reversed, choices))
    assert labels[best].endswith("(farthest beyond the noise)")
    assert all(("beyond the noise bound" in labels[i]) == (excess[i] > 0) for i in excess)
    assert "Step on" not in view.summary and "Why" not in view.summary       # nothing to excuse


def test_sample_at_temperature_0_says_the_bug_and_the_rule_coincide_and_never_advises_stepping_on(close_loader):
    s = decided_round(close_loader, lambda r: r.tested, k=3, temperature=0.0)
    view = h.sample(s)
    assert "**At temperature 0 p and q are one-hot, each all on its argmax**" in view.summary
    assert "coincide exactly" in view.summary and "no round with these settings can show a difference" in view.summary
    assert "total variation = **0.000**" in view.summary and "set a temperature above 0" in view.summary
    assert "step on" not in view.summary.lower() and "another round" not in view.summary
    top_k_1 = decided_round(close_loader, lambda r: r.tested, k=3, temperature=1.0, top_k=1)
    assert "**At top-k 1 p and q are one-hot" in h.sample(top_k_1).summary    # one-hot at any temperature
    lookup = decided_round(close_loader, lambda r: r.tested, k=3, temperature=1.0, drafter="lookup")
    assert "**The prompt-lookup drafter's q is one-hot" in h.sample(lookup).summary  # and q alone, by construction
    assert "pick the drafter 'draft model'" in h.sample(lookup).summary


def test_when_no_position_differs_beyond_the_noise_sample_says_so_and_offers_what_would(close_loader):
    # a prompt whose first draft the verifier's nucleus excludes: rejected, and the bug emits p exactly there
    s = decided_round(close_loader, lambda r: r.tested and all(e <= 0 for e in beyond_the_noise(r).values()), k=3,
                      temperature=1.0, top_p=0.05, prompt="w3 w4")
    r = s.walk.shown
    view = h.sample(s)
    assert view.summary.startswith(f"**At no tested position of round {r.index + 1} does the argmax bug land off p "
                                   "by more than sampling noise can.**")
    assert "step another round, let p and q spread out (a higher temperature" in view.summary
    assert "the **Rule** tab" in view.summary
    assert all("within the noise bound" in label for label, _ in h.sample_positions(s)[0])


def test_sample_takes_a_picked_position_and_answers_a_bad_pick_with_a_problem(close_loader):
    s = decided_round(close_loader, lambda r: r.rejected_at == 1, k=3)         # kept, rejected, never tested
    other = 3 - h.sample_positions(s)[1]                                       # the position not taken by default
    picked = h.sample(s, float(other))                                         # a whole float is the number
    assert isinstance(picked, SampleView) and sampled_position(picked) == other and "as picked" in picked.summary
    assert "the position that decided the round" in h.sample(s, 2).summary
    for bad, said in ((99, "has no position 99"), (0, "has no position 0"), ("two", "Pick a position of round"),
                      (True, "Pick a position of round"), (3, "decided nothing (not tested: after the rejection)")):
        problem = h.sample(s, bad)
        assert isinstance(problem, Problem) and said in problem.message, (bad, problem)
    assert isinstance(h.sample(Session(), 1), Problem)                        # nothing decided yet


def test_the_verify_text_teaches_the_premise_with_this_machines_numbers(loader):
    from specdec.teach.render import cost_details, explain
    s = Session()
    step(loader, "verify", s, form(k=4))
    r = replace(s.walk.shown, times=replace(s.walk.shown.times, verify=0.052))
    text = explain(r, "verify", step_fit=(31.0, 4.1))
    # one forward over K + 1 = 5 positions against 5 plain steps of t(1) = 31 + 4.1 ms, per position
    assert "One verifier forward checked all 5 positions in 52 ms; 5 plain one-token steps would take about 5 × 35 " \
           "= 176 ms here. That is **10 ms per position instead of 35 ms**" in text
    assert "about 4.1 ms each on this machine" in text
    assert "v(K)" not in text and "t_f" not in text                            # the letters are behind the toggle
    assert "busy" not in text and "slow" not in text                          # 52 ms is what the line predicts (51.5)
    details = cost_details(4, 0.052, (31.0, 4.1))
    assert "t(L) = t_f + t_r·L = 31 + 4.1·L ms" in details and "t(5) = 52 ms" in details
    assert "v(K) = this forward / t(1) = 1.48 steps for K = 4 drafted tokens" in details
    assert cost_details(4, 0.052, None) == ""
    # a forward far slower than the line predicts, and one no cheaper than the separate steps, say why
    slow = explain(replace(r, times=replace(r.times, verify=0.090)), "verify", step_fit=(31.0, 4.1))
    assert "This time it was slow: this machine's timed forwards predict about 52 ms for 5 positions, and this one " \
           "took 1.7x that. Something else used the cores" in slow
    no_cheaper = explain(replace(r, times=replace(r.times, verify=0.200)), "verify", step_fit=(31.0, 4.1))
    assert "This time it was no cheaper than the separate steps" in no_cheaper
    assert "positions in 52 ms (one measurement)" in explain(r, "verify") and "being timed" in explain(r, "verify")
    loader.step_fit = (2.0, 0.5)                                                # the page passes this machine's fit in
    try:
        view = step(loader, "verify", Session(), form(k=4))
    finally:
        loader.step_fit = None
    assert "5 plain one-token steps would take about 5 × 2 = 12 ms" in view.explain
    assert "<details" in view.explain and "t(L) = t_f + t_r·L = 2 + 0.5·L ms" in view.explain


def test_step_through_drafts_all_k_when_asked_whatever_the_draft_confidence(loader):
    s = Session()
    step(loader, "draft", s, form(k=4, confidence=0.99))
    assert s.walk.shown.drafted < 4                                # a tiny random draft is never 99 % sure
    s = Session()
    view = list(h.step(loader, "draft", s, form(k=4, confidence=0.99), all_k=True))[-1]
    assert s.walk.shown.drafted == 4 and s.settings.decode.confidence == 0.0
    assert "Drafted K = 4 tokens." in view.explain                 # the draft text reads the confidence that ran
    s.replay = None
    again = list(h.step(loader, "draft", s, form(k=4, confidence=0.99), all_k=False))[-1]
    assert "changed" in again.status                               # the override off is a new run, said so


def test_a_second_press_while_the_first_waits_for_the_models_runs_after_it(loader):
    import threading
    s = Session()
    views = {}

    def press(action):
        views[action] = list(h.step(loader, action, s, form(k=4), True))[-1]
    with loader.pair.lock:                                         # another session's round holds the models
        draft = threading.Thread(target=press, args=("draft",))
        draft.start()
        while s.gen is None:                                        # Draft has made its generation and waits
            threading.Event().wait(0.01)
        verify = threading.Thread(target=press, args=("verify",))  # pressed before Draft has shown its round
        verify.start()
        verify.join(0.2)
        assert verify.is_alive()                                    # it waits for Draft, not for the models
    draft.join()
    verify.join()
    assert s.walk.shown.index == 0 and s.walk.phase == "verify" and len(s.gen.rounds) == 1
    assert views["verify"].status.startswith("Round 1: drafted and verified")
    import copy
    assert copy.deepcopy(Session()).stepping is not None          # gradio deep-copies a session's first state


def test_the_start_here_steps_set_valid_settings_and_open_tabs_in_the_lessons_order():
    from specdec_ui import start
    from specdec_ui.layout import EXAMPLES
    from specdec_ui.state import parse_form
    path = start.steps(EXAMPLES[0][0])
    assert [s.tab for s in path[:4]] == [start.RULE, start.STEP, start.RUN, start.COMPARE]
    assert [s.button[0] for s in path] == ["1", "2", "3", "4", "5"]
    for s in path:
        if s.settings is not None:
            settings = parse_form(s.settings)                      # the form it sets is one a run accepts
            assert settings.prompt == EXAMPLES[0][0] and settings.drafter == "model"
    assert path[1].settings == {**form_defaults(), "prompt": EXAMPLES[0][0]} and path[1].all_k
    assert parse_form(path[4].settings).decode.sampling.temperature == 0.8


def test_the_loaders_timing_runs_its_rounds_without_holding_the_models_lock_itself(tree_loader, monkeypatch):
    import threading

    import specdec.model.calibration
    monkeypatch.setattr(specdec.model.calibration, "cached", lambda key, cpu, measure: measure()["timings_ms"])
    monkeypatch.setattr(tree_loader, "step_fit", None)                         # restored after the test
    timing = threading.Thread(target=tree_loader._time_verification, daemon=True)
    timing.start()
    timing.join(120)
    assert not timing.is_alive(), "the timing waits on a lock it holds"       # its short runs take the lock per round
    assert tree_loader.step_fit is not None and not tree_loader.pair.lock.locked()


def test_the_loader_times_this_machines_verifier_once_the_models_are_loaded(tree_loader, loader, monkeypatch):
    import specdec.decode.tree_shape
    monkeypatch.setattr(specdec.decode.tree_shape, "machine_costs", lambda pair: {"verify": [31.0, 4.1], "draft": [9, 1]})
    monkeypatch.setattr(tree_loader, "step_fit", None)                         # restored after the test
    tree_loader._time_verification()
    assert tree_loader.step_fit == (31.0, 4.1)
    loader._time_verification()                                                # not the lean forward: nothing timed
    assert loader.step_fit is None


def test_step_reaches_the_end_and_says_so(loader):
    s = Session()
    for _ in range(20):
        view = step(loader, "step", s, form(max_new_tokens=3))
    assert "finished" in view.status
    assert sum(len(r.emitted) for r in s.walk.rounds) <= 3


@pytest.mark.parametrize("field,value", [
    ("k", 0), ("k", 33), ("k", None), ("k", 2.5), ("temperature", -1.0), ("temperature", 1e-45), ("top_k", -1),
    ("top_p", 0.0), ("top_p", 1.5), ("seed", -1), ("max_new_tokens", 0), ("max_new_tokens", 3.5), ("prompt", "  "),
    ("drafter", "oracle"), ("confidence", 1.0), ("draft_noise", -0.1), ("draft_noise", 1.5), ("draft_noise", None)])
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


@pytest.mark.parametrize("runs", [0, 6, 2.5, None, "3"])
def test_compare_refuses_a_bad_number_of_runs(loader, runs):
    (problem,) = list(h.compare(loader, Session(), form(), runs))
    assert problem.field == "runs" and problem.message.startswith("Runs must be a whole number in [1, 5]")


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
    assert list(h.compare(loading, Session(), form())) == [Problem(h.NOT_READY)]


def test_loader_reports_a_bad_setting_instead_of_raising():
    loader = Loader(ModelChoice("embedded:none", None, device="quantum")).load_in_background().wait(30)
    assert loader.pair is None and "device" in loader.error


def test_stop_ends_a_run_cleanly_and_idle_stop_says_so(loader, monkeypatch):
    monkeypatch.setattr(h, "REFRESH_S", 0.01)
    s = Session()
    assert h.stop(s) == "Nothing is running."
    run = h.run(loader, s, form(max_new_tokens=200))
    assert next(run).status.startswith("Reading the prompt")
    assert next(run).status.startswith("Round ")  # the run goes on in its worker; the page follows
    assert h.stop(s).startswith("Stopping")
    rest = list(run)
    assert rest[-1].status.startswith("Stopped after ") and rest[-1].download
    trace = json.loads(open(rest[-1].download, encoding="utf-8").read())
    assert trace["stop_reason"] == "cancelled" and len(trace["text"]) and rest[-1].status == \
        f"Stopped after {plural(len(trace['rounds']), 'round', 'rounds')}."
    assert h.stop(s) == "Nothing is running."
    assert isinstance(step(loader, "step", s, form()), StepView)  # the session carries on


def test_trace_round_trip_replays_without_models_and_restores_the_settings(loader, tmp_path):
    f = form(seed=3, k=3, temperature=0.9, draft_noise=0.1)
    final = list(h.run(loader, Session(), f))[-1]
    raw = open(final.download, encoding="utf-8").read()
    trace = TraceFile.from_json(raw)
    assert json.loads(json.dumps([r.to_dict() for r in trace.rounds])) == json.loads(raw)["rounds"]
    s = Session()
    replayed = h.replay(s, final.download)
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
    assert step(offline, "step", s, {**replayed.form, "seed": 99}) == Problem(h.NOT_READY)


def test_an_uploaded_trace_switches_the_step_through_to_it_at_once(loader, tmp_path):
    final = list(h.run(loader, Session(), form(seed=5, temperature=0.9, max_new_tokens=8)))[-1]
    s = Session()
    for seed in range(10):                                        # a live round on show, its position sampled
        step(loader, "accept", s, form(seed=seed))
        if s.walk.shown.tested:
            break
        step(loader, "reset", s, form(seed=seed))
    assert isinstance(h.sample(s), SampleView) and h.replayed_step(s, final.download) is None  # nothing uploaded yet
    replayed = h.replay(s, final.download)
    trace = s.replay
    v = h.replayed_step(s, final.download)
    name = final.download.rsplit("/", 1)[-1]
    assert v.status.startswith(f"Replaying {name}: {plural(len(trace.rounds), 'round', 'rounds')} of the uploaded trace")
    assert (v.table, v.dist, v.ratio, v.explain) == ("", None, None, "") and "No tokens yet." in v.text  # the old round gone
    assert s.walk == Walkthrough() and h.sample_is_stale(s) and h.sample_positions(s) == ([], None)
    offline = Loader(ModelChoice("embedded:none", None))
    first = step(offline, "step", s, replayed.form)               # its first round, with no "restarted" notice
    assert s.walk.rounds == trace.rounds[:1] and "changed" not in first.status
    bad = tmp_path / "bad.json"
    bad.write_text("not json", encoding="utf-8")
    assert isinstance(h.replay(s, str(bad)), Problem) and h.replayed_step(s, str(bad)) is None  # a refusal: as it was
    assert s.walk.rounds == trace.rounds[:1]


@pytest.mark.parametrize("content,said", [
    ('{"rounds": 3}', "not a specdec trace"), ("not json", "not a specdec trace"),
    ('{"format": 1, "rounds": []}', "not a specdec trace"), ("[" * 100_000 + "]" * 100_000, "not a specdec trace"),
    (b"\xff\xfe\x00binary", "not UTF-8 text")])
def test_a_file_that_is_not_a_trace_is_refused_and_nothing_changes(tmp_path, content, said):
    garbage = tmp_path / "x.json"
    garbage.write_bytes(content if isinstance(content, bytes) else content.encode())
    s = Session()
    problem = h.replay(s, str(garbage))
    assert isinstance(problem, Problem) and said in problem.message and problem.message.startswith("x.json: ")
    assert problem.field == "upload" and problem.message.endswith("The view above is unchanged.")
    assert s.replay is None and h.replay(s, None) is None


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
    final = list(h.run(loader, Session(), form(temperature=0.9, max_new_tokens=6)))[-1]
    data = json.loads(open(final.download, encoding="utf-8").read())
    where = data["rounds"][0]
    for key in path[:-1]:
        where = where[key]
    where[path[-1]] = value
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data), encoding="utf-8")
    s = Session()
    problem = h.replay(s, str(bad))
    assert isinstance(problem, Problem) and problem.field == "upload" and said in problem.message, problem
    assert s.replay is None


def test_compare_at_temperature_zero_shows_the_identical_badge_and_the_why(loader):
    views = list(h.compare(loader, Session(), form(temperature=0.0, max_new_tokens=12)))
    final = views[-1]
    assert isinstance(final, CompareView) and all(v.verdict == "" for v in views[:-1])  # no verdict while it runs
    n = int(final.race.data[0].y[-1])                             # the verifier-only run's tokens
    assert 'class="cmp-verdict cmp-identical" role="status"' in final.verdict
    assert f"Identical output: {n} of {n} tokens" in final.verdict and "Identical" not in final.badge
    assert f"The same {n} tokens in both outputs" in final.aligned and "al-col" not in final.aligned  # one text
    assert final.base_text.replace("Verifier only", "") == final.spec_text.replace("Speculative", "")
    assert "No text yet" not in final.base_text and final.tree_text == ""
    assert "**Speed-up**" in final.badge and "the prefill excluded" in final.badge and "One run" in final.badge
    assert len(final.race.data) == 2 and final.live == ""
    assert final.why.startswith("**Why ") and "c = " in final.why and final.why_chart is not None
    assert "Draft noise" not in final.why and "gains more than prose" not in final.why


def test_compare_at_temperature_above_zero_does_equal_work_over_several_runs(loader, pair):
    s = Session()
    final = list(h.compare(loader, s, form(temperature=1.0, max_new_tokens=10), runs=3))[-1]
    assert "cmp-by-design" in final.verdict and "Sampling: outputs differ by design" in final.verdict
    assert "median of 3 runs; range" in final.badge
    assert "median of 3 runs" in final.base_stats and "median of 3 runs" in final.spec_stats
    assert len(final.race.data) == 6
    # every run generated exactly max-new-tokens tokens: a stop token does not end one early
    assert all(t.y[-1] == 10 for t in final.race.data)


def aligned_rows(html: str) -> tuple[str, list[str]]:
    """The aligned view's shared text, and each output's row of cells joined, as a reader sees them
    (whitespace markers are CSS, not text)."""
    from html.parser import HTMLParser

    class Cells(HTMLParser):
        def __init__(self):
            super().__init__()
            self.stack, self.same, self.rows = [], "", {}

        def handle_starttag(self, tag, attrs):
            classes = (dict(attrs).get("class") or "").split()
            self.stack.append(classes)

        def handle_endtag(self, tag):
            self.stack.pop()

        def handle_data(self, data):
            if any("cmp-same" in c for c in self.stack):
                self.same += data
            cell = next((c for c in self.stack if "al-cell" in c), None)
            if cell and not any("al-key" in c for c in self.stack):
                row = int(next(c for c in cell if c.startswith("al-r"))[4:])
                self.rows[row] = self.rows.get(row, "") + data
    p = Cells()
    p.feed(html)
    return p.same, [p.rows[r] for r in sorted(p.rows)]


def test_the_aligned_outputs_line_up_token_for_token_and_mark_the_first_difference():
    from specdec_ui.views import aligned_html
    base = [(1, "def"), (2, " f"), (3, "():\n"), (4, "    return"), (5, " 1")]
    spec = [(1, "def"), (2, " f"), (3, "():\n"), (6, "    pass"), (5, " 1"), (7, " # end")]
    html = aligned_html({"verifier only": base, "speculative": spec}, settled=True)
    same, rows = aligned_rows(html)
    assert same == "def f():\n"                                     # the shared start, once, as text
    # each row is its output token for token from there (the line breaks fall between columns)
    assert rows == ["    return 1", "    pass 1 # end"]
    assert html.count('class="al-col al-first"') == 1 and 'data-n="4"' in html   # "    pass": token 4
    assert html.count("al-diff") == 2                              # "    pass" and " # end" (after verifier only's end)
    assert html.count("al-none") == 1 and "Tokens 1–3 are the same in both outputs" in html
    # while the runs go, a token the other side has not reached yet differs from nothing
    ahead = aligned_html({"verifier only": base[:3], "speculative": spec[:4]}, settled=False)
    assert "al-diff" not in ahead and "al-first" not in ahead and "one run is ahead" in ahead
    twins = aligned_html({"verifier only": base, "chain": base, "tree": base}, settled=True)
    assert "The same 5 tokens in all 3 outputs" in twins and "al-col" not in twins
    assert aligned_rows(twins)[0] == "".join(t for _, t in base)
    assert aligned_html({"verifier only": [], "speculative": []}, settled=False) == ""


def test_why_names_draft_noise_when_it_is_on_and_a_is_one_number(loader):
    noisy = list(h.compare(loader, Session(), form(temperature=0.0, max_new_tokens=12, draft_noise=0.5)))[-1]
    assert "**Draft noise e = 0.50** was on" in noisy.why and "a / (1 − e)" in noisy.why
    assert "gains more than prose" not in noisy.why
    # one acceptance figure, a = kept / tested, the same in the column and in Why
    a = re.search(r"\*\*a = ([\d.]+)\*\* = drafts kept / tested = (\d+) / (\d+)", noisy.spec_stats)
    assert a and f"**a = {a.group(1)}** (the column's a, kept / tested)" in noisy.why
    assert f"{int(a.group(2)) / int(a.group(3)):.2f}" == a.group(1)
    assert "acceptance" not in noisy.spec_stats and "kept / drafted" not in noisy.spec_stats
    # the figure is the round's tokens over its cost in verifier-only steps: the sentence's own arithmetic
    said = re.search(r"Why ([\d.]+)x\?\*\* A speculative round gave \*\*([\d.]+) tokens\*\*.*?"
                     r"\*\*([\d.]+) verifier-only steps\*\*.*?: \2 / \3 = \1x", noisy.why)
    assert said, noisy.why
    plain = list(h.compare(loader, Session(), form(temperature=0.0, max_new_tokens=12)))[-1]
    assert "Draft noise" not in plain.why


@pytest.mark.parametrize("code,prose,said", [
    ((30, 30), (5, 30), "Code drafted better than prose in this text: words of code (keywords and identifiers) kept "
                        "100% (30 of 30), words of prose 17% (5 of 30)"),
    ((3, 30), (25, 30), "Prose drafted better than code"),
    ((15, 30), (14, 30), ""),                                     # a gap within sampling noise
    ((30, 30), (1, 9), "")])                                      # too few words of prose to compare
def test_why_names_the_kind_of_text_only_when_the_counts_say_so(monkeypatch, code, prose, said):
    from specdec.teach import tokenkind
    from specdec_ui import views
    counts = (tokenkind.KindCount(tokenkind.KEYWORD, 0, 0), tokenkind.KindCount(tokenkind.IDENTIFIER, *code),
              tokenkind.KindCount(tokenkind.WORD, *prose))
    monkeypatch.setattr(views, "acceptance_by_kind", lambda *runs: counts)
    sentence = views._text_kind([])
    assert (said in sentence and sentence != "") if said else sentence == ""


def test_the_page_is_built_from_the_view_records(pair):
    from specdec_ui.layout import build_demo
    demo = build_demo(Loader(ModelChoice.of(pair), pair))  # asserts every view field has its component
    assert demo.title == "Speculative decoding"
    assert tuple(form_defaults()) == FORM
    d = DecodeConfig()
    assert (form_defaults()["k"], form_defaults()["max_new_tokens"]) == (d.k, d.max_new_tokens)
    for record in (StepView, RunView, CompareView, SampleView):
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
    assert final.status.startswith("Round 1: drafted, verified, decided and committed")
    # waiting is not compute: counted, the wait (a timer of 0.3 s never fires early) would make total >= waited_s
    assert s.gen.waited_s >= 0.2 and s.gen.rounds[0].times.total < s.gen.waited_s + 1  # not a clock assert: a second of slack


def test_temperature_zero_says_the_rule_has_nothing_to_decide(loader):
    view = step(loader, "accept", Session(), form(temperature=0.0))
    assert view.banner.startswith("**Temperature 0: the rule has nothing to decide.**")
    assert "At temperature 0 p and q are one-hot" in view.explain
    assert step(loader, "accept", Session(), form(temperature=0.8)).banner == ""


def test_text_keeps_its_shape_with_visible_whitespace_that_is_never_copied(pair):
    from specdec.teach.render import Segment
    segs = [Segment("def", "accepted", 0, 0, 0.9, 0.9), Segment("\n", "accepted", 0, 1, 0.9, 0.9),
            Segment("    ", "bonus", 0, 2, 0.9), Segment("return", "resampled", 1, 0, 0.5)]
    html = token_html(segs)
    assert '<span class="nl"></span>\n' in html and html.count('<span class="sp"> </span>') == 4  # marked, kept
    assert "return" in html and 'class="spec-tokens"' in html
    plain = plain_html("a b\n\tc")
    assert plain == '<pre class="spec-plain">a<span class="sp"> </span>b<span class="nl"></span>\n' \
                    '<span class="tab">\t</span>c</pre>'
    # the markers are drawn only on request (the page's "show whitespace" box), where the whitespace
    # itself is dropped (a rejected draft shown inline), or in Compare's token columns (where a
    # whitespace token would be a blank cell and its line break falls between columns)
    from specdec_ui.layout import CSS
    drawn = [rule for rule in re.findall(r"([^{}]*)\{[^}]*content:", CSS) if re.search(r"\.(sp|tab|nl)::before", rule)]
    assert drawn and all(".show-whitespace" in rule and ".tok-rejected" in rule or rule.strip().startswith(".cmp-grid")
                         for rule in drawn), drawn


# ---- token trees (issue 16) -------------------------------------------------------------------

@pytest.fixture(scope="module")
def tree_loader():
    """The tree drafter needs the lean forward: a verifier and a noisy copy of it as the draft."""
    hf = tiny.model(0, scale=4)
    pair = tiny.pair(tiny.lean(hf), tiny.lean(tiny.noisy_copy(hf, 1, 0.3), batch_invariant=False))
    return Loader(ModelChoice.of(pair), pair)


def tree_form(**kw) -> dict:
    return form(**{"drafter": "tree", "tree_width": 3, "tree_nodes": 10, **kw})


def test_a_tree_round_is_drawn_tested_and_masked_phase_by_phase(tree_loader):
    from specdec.decode.tree import mask_grid
    for seed in range(13, 40):  # a round where a rejection hands its residual on to the next sibling
        s = Session()
        drafted = step(tree_loader, "draft", s, tree_form(seed=seed))
        r = s.walk.shown
        nodes = r.tree.nodes
        if any(n.status == REJECTED and any(m.parent == n.parent and m.status != "untested" for m in nodes[j + 1:])
               for j, n in enumerate(nodes)):
            break
    else:
        pytest.fail("no seed tested a sibling after a rejection")
    assert drafted.table == drafted.tests == drafted.mask == "" and drafted.dist is None and drafted.ratio is None
    assert tree_kinds(drafted) == {"root": 1, "drafted": len(nodes) - 1}
    assert "q = " in tree_tips(drafted)[-1] and "p = " not in tree_tips(drafted)[-1]
    assert all(f"{NAMES[k]}" in drafted.tree for k in ("root", "drafted"))  # the legend names what is drawn
    assert f"{len(nodes) - 1} nodes in" in drafted.explain and "the verifier has not run yet" in drafted.cache
    verified = step(tree_loader, "verify", s, tree_form(seed=seed))
    assert "p = " in tree_tips(verified)[-1] and verified.tests == ""
    grid = mask_grid([n.parent for n in nodes])
    assert verified.mask.count('class="on"') == sum(map(sum, grid)) and "row i may attend column j" in \
        verified.mask.lower() and "every row also sees the whole context" in verified.mask
    assert f"+ {len(nodes)} tree rows" in verified.cache and f"= {r.target_cache[0]} after the forward" in verified.cache
    decided = step(tree_loader, "accept", s, tree_form(seed=seed))
    shown = tree_kinds(decided)
    for status in ("accepted", "rejected", "untested"):
        assert shown.get(status, 0) == sum(n.status == status for n in nodes)
    assert shown[r.next_kind] == 1                                             # the token that ends the round
    boxes = tree_boxes(decided)                                                # in node order, the final token last
    depth = [n.depth for n in nodes] + [nodes[r.tree.kept[-1] if r.tree.kept else 0].depth + 1]
    for (xa, _, _, _), da in zip(boxes, depth):                                # depth left to right, one column each
        for (xb, _, _, _), db in zip(boxes, depth):
            assert (xa < xb) == (da < db) and (xa == xb) == (da == db)
    for i, a in enumerate(boxes):                                              # no two boxes meet
        for b in boxes[i + 1:]:
            assert a[0] + a[2] <= b[0] or b[0] + b[2] <= a[0] or a[1] + a[3] <= b[1] or b[1] + b[3] <= a[1]
    rows = re.findall(r'<tr class="row-(\w+)"><th scope="row">([^<]*)</th>(.*?)</tr>', decided.tests, re.S)
    tested = sorted((j for j, n in enumerate(nodes) if n.status in ("accepted", "rejected")),
                    key=lambda j: (nodes[j].depth, j))
    assert [st for st, _, _ in rows] == [nodes[j].status for j in tested] + [r.next_kind]
    for _, _, cells in rows:  # each value names its column, for the cards a narrow screen shows
        assert [html_text(c) for c in re.findall(r'<td[^>]* data-label="([^"]*)"', cells)] == TREE_HEADERS[1:]
    for (_, _, cells), j in zip(rows, tested):
        cells = [html_text(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", cells)]
        assert cells[1] == f"{j}: {nodes[j].text!r}" and float(cells[7]) == pytest.approx(nodes[j].ratio, abs=1e-3)
        assert float(cells[8]) == pytest.approx(nodes[j].u, abs=1e-3)
        if nodes[j].status == REJECTED:  # its residual is what the next sibling is tested against
            assert cells[10].startswith(f"{nodes[j].residual_top[0].text!r} {nodes[j].residual_top[0].prob:.2f}")
    assert "the residual after" in decided.tests and "u ≤ r(x)/q′(x)" in decided.explain
    committed = step(tree_loader, "commit", s, tree_form(seed=seed))
    assert f"= {r.target_cache[1]} after keeping the path" in committed.cache
    assert visible_text(committed.text) == output_text(segments([r]))
    assert isinstance(h.sample(s), Problem)                                    # the chain's rule: not a tree's


def _shown_digits(cell: str) -> float:
    """Half a unit in the last digit a number is shown with: how far the shown value can be from the true one."""
    mantissa, _, exponent = cell.lower().partition("e")
    decimals = len(mantissa.partition(".")[2])
    return 0.5 * 10.0 ** (-decimals + (int(exponent) if exponent else 0))


def test_every_sibling_tests_ratio_is_the_quotient_of_the_two_numbers_shown_beside_it(tree_loader):
    """T > 0, a sibling tested after a rejection: its ratio is r(x)/q′(x) (the residual over q renormalised
    without the rejected token), both in the table; a first child's r and q′ are its p and q."""
    from specdec_ui.tree_views import tests_html
    for seed in range(13, 40):
        s = Session()
        step(tree_loader, "accept", s, tree_form(seed=seed))
        r = s.walk.shown
        later = [j for j, n in enumerate(r.tree.nodes) if n.status in ("accepted", "rejected") and any(
            m.parent == n.parent and m.status == REJECTED for m in r.tree.nodes[1:j])]
        if later:
            break
    else:
        pytest.fail("no seed tested a sibling after a rejection")
    rows = re.findall(r'<tr class="row-(\w+)"><th scope="row">[^<]*</th>(.*?)</tr>', tests_html(r, greedy=False), re.S)
    col = {h: i - 1 for i, h in enumerate(TREE_HEADERS)}
    checked = 0
    for _, cells in rows[:-1]:                                                 # the last row is the final draw
        cells = [html_text(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", cells)]
        (r_x, dr), (q_x, dq) = ((float(cells[col[h]]), _shown_digits(cells[col[h]])) for h in (R_X, Q_RENORM))
        ratio = float(cells[col[RATIO]])
        assert (r_x - dr) / (q_x + dq) - 5e-4 <= ratio <= (r_x + dr) / (q_x - dq) + 5e-4, cells
        if cells[col[AGAINST]] == "p":                                        # a first child: p/q
            assert (r_x, q_x) == pytest.approx((float(cells[col["p(x)"]]), float(cells[col["q(x)"]])), abs=1e-4)
        else:                                                                  # renormalised: q′ > q
            assert q_x > float(cells[col["q(x)"]])
        checked += 1
    assert checked == len(rows) - 1 and len(later) >= 1


def test_siblings_stack_in_test_order_and_a_parent_sits_between_its_children():
    from specdec.teach.render_tree import slots
    assert slots([-1, 0, 1, 1, 0]) == [-1.25, -0.5, 0.0, -1.0, -2.0]


def tree_kinds(view) -> Counter:
    """How many nodes of each kind the tree drawing holds (its boxes' classes)."""
    return Counter(re.findall(r'class="tree-node node-(\w+)"', view.tree))


def tree_tips(view) -> list[str]:
    """Each box's hover and focus text, in node order."""
    return [html_text(t) for t in re.findall(r"<title>(.*?)</title>", view.tree, re.S)]


def tree_boxes(view) -> list[tuple[float, float, float, float]]:
    """Each box's x, y, width, height, in node order."""
    return [tuple(map(float, m)) for m in
            re.findall(r'<rect x="([\d.]+)" y="([\d.]+)" width="([\d.]+)" height="([\d.]+)"', view.tree)]


def html_text(cell: str) -> str:
    import html as html_lib
    return html_lib.unescape(re.sub(r"<[^>]+>", "", cell))


def test_a_greedy_tree_round_follows_the_argmax_and_a_chain_round_shows_no_tree(tree_loader, loader):
    view = step(tree_loader, "accept", Session(), tree_form(temperature=0.0))
    assert "VerifyGreedy" in view.explain and "the argmax" in view.tests and "no u is drawn" in view.tests
    assert view.banner.startswith("**Temperature 0: the rule has nothing to decide.** The walk steps to the child")
    chain = step(loader, "accept", Session(), form(temperature=0.0))
    assert chain.tree == chain.tests == chain.mask == "" and chain.table and chain.ratio is not None


def test_at_temperature_zero_no_view_shows_a_u_and_verdicts_speak_of_the_argmax(loader, tree_loader):
    for seed in range(20):  # a round where a draft was not the verifier's argmax
        s = Session()
        view = step(loader, "accept", s, form(temperature=0.0, seed=seed, k=4, prompt="w5 w9 w2 w7"))
        r = s.walk.shown
        if r.rejected_at is not None:
            break
    else:
        pytest.fail("no seed rejected a draft at temperature 0")
    assert all(p.u is None for p in r.positions)                              # no draw is recorded
    table = html_text(view.table)
    assert "rejected: not the verifier's argmax" in table and "u ≤" not in table and "u >" not in table
    assert "no draw u is made" in view.explain and "u = " not in view.explain
    assert f"replaced by the verifier's argmax {r.next_token.text!r}" in view.explain
    assert "no draw u is made" in view.banner
    names = [t.name for t in view.ratio.data]
    hovers = [h for t in view.ratio.data for h in (t.hovertext or [])]
    assert "draw u" not in names and not any("u = " in h for h in hovers)
    assert "rejected: not the verifier's argmax" in names and view.ratio.layout.yaxis.title.text == "min(1, p/q)"
    assert '<th scope="col">u</th>' not in view.table                       # no column of dashes for a u never drawn
    assert [t.name for t in view.dist.data] == ["p (verifier)", "q (draft)"]  # no residual: the argmax replaces it
    assert "residual" not in view.dist.layout.title.text and "the verifier's argmax, replaces it" in \
        view.dist.layout.title.text
    tree = step(tree_loader, "accept", Session(), tree_form(temperature=0.0))
    assert not any("u = " in tip for tip in tree_tips(tree))
    assert '<th scope="col">u</th>' not in tree.tests and "r after it" not in tree.tests
    # above temperature 0 the draws are shown
    hot = step(loader, "accept", Session(), form(temperature=0.8, k=4))
    assert "draw u" in [t.name for t in hot.ratio.data] and "u_i ≤ p(x)/q(x)" in hot.explain
    assert '<th scope="col">u</th>' in hot.table


@pytest.mark.parametrize("field,value,said", [
    ("tree_width", 9, "Tree width W (0 = this machine's choice) must be an integer in [1, 8], or 0"),
    ("tree_width", 2.5, "Tree width W (0 = this machine's choice) must be a whole number (got 2.5)"),
    ("tree_nodes", 65, "Tree nodes N (0 = this machine's choice) must be an integer in [1, 64], or 0"),
    ("tree_nodes", None, "Tree nodes N (0 = this machine's choice) is empty: enter an integer in [1, 64]")])
def test_the_tree_fields_are_checked_at_their_field_with_the_tree_drafter_only(tree_loader, field, value, said):
    problem = step(tree_loader, "step", Session(), tree_form(**{field: value}))
    assert isinstance(problem, Problem) and problem.field == field and problem.message.startswith(said)
    assert isinstance(step(tree_loader, "step", Session(), form(**{field: value})), StepView)  # hidden: not read


def test_the_tree_settings_round_trip_through_the_form():
    from specdec_ui.state import form_values, parse_form
    f = tree_form(tree_width=2, tree_nodes=12)
    settings = parse_form(f)
    assert (settings.decode.tree_width, settings.decode.tree_nodes) == (2, 12)
    assert form_values(settings) == f and set(form_values(settings)) == set(FORM)
    assert parse_form(form(tree_width=2)).decode.tree_width == 0              # another drafter: the default


def test_a_tree_run_says_nodes_per_round_and_compare_races_three_columns(tree_loader):
    final = list(h.run(tree_loader, Session(), tree_form(seed=1)))[-1]
    assert "nodes drafted per round** on average" in final.stats and "steps down the tree kept / tried" in final.stats
    assert final.tokens.data[0].name.startswith("theory for a chain as deep as each tree")
    assert final.download and visible_text(final.text) == json.loads(open(final.download).read())["text"]
    view = list(h.compare(tree_loader, Session(), tree_form(temperature=0.0, max_new_tokens=12)))[-1]
    assert view.tree_side and view.spec_title == "### Chain (draft model)"
    assert "Identical output" in view.verdict and "The chain and the tree each reproduced" in view.verdict
    assert "chain **" in view.badge and "tree **" in view.badge
    assert "tokens in all 3 outputs" in view.aligned and "al-col" not in view.aligned
    assert "No text yet" not in view.tree_text and "Tree (draft model)" in view.tree_text
    assert [t.name for t in view.race.data] == ["verifier only", "chain", "tree"]
    assert "nodes drafted per round" in view.tree_stats and "for the chain?**" in view.why
    assert "**The tree against the chain, per round:**" in view.why
    chain = list(h.compare(tree_loader, Session(), form(temperature=0.0, max_new_tokens=6)))[-1]
    assert not chain.tree_side and chain.spec_title == "### Speculative" and len(chain.race.data) == 2


def test_the_tree_drafter_says_which_shape_ran_and_why_and_offers_a_real_tree(tree_loader, monkeypatch):
    import specdec.decode.tree_shape
    from specdec_ui.views import REAL_TREE, REAL_TREE_BUTTON
    shapes = [{"k": 4, "width": 1, "budget": 4, "tokens_per_round": 3.0, "nodes": 4, "draft_forwards": 4,
               "draft_rows": 4},
              {"k": 4, "width": 3, "budget": 12, "tokens_per_round": 3.6, "nodes": 11, "draft_forwards": 4,
               "draft_rows": 10}]
    monkeypatch.setattr(specdec.decode.tree_shape, "measured_shapes", lambda pair: {"shapes": {"sampled": shapes}})
    costs = {"verify": [130.0, 16.0], "draft": [39.0, 5.0], "round": 40.0}   # AVX2-like: rows are dear
    monkeypatch.setattr(specdec.decode.tree_shape, "machine_costs", lambda pair: costs)
    defaults = tree_form(tree_width=0, tree_nodes=0)
    s = Session()
    view = step(tree_loader, "step", s, defaults)
    assert s.walk.shown.tree is None and view.real_tree and view.table               # a chain round, and the offer
    # 3.0 tokens / (4 draft forwards and rows at 39 + 5 ms, the verifier 130 + 16 ms per row x 5 rows, 40 ms besides)
    assert view.banner.startswith("**The tree drafter ran the chain.** W = 1, N = 4, the chain: predicted 7.0 tok/s "
                                  "for it on a quiet machine, from this machine's timed forwards and rounds (the speed a run reports as its "
                                  "decoding tok/s: tokens / the rounds' compute) = 3.00 tokens per round (counted for "
                                  "these models by benchmarks/trees.py) / 426 ms per round (drafting 176 ms, the "
                                  "verifier forward 210 ms = 130 + 16.0 ms per row × 5.0 rows, the rest of the round "
                                  "40 ms), against ")
    assert "for the best tree (W = 3, N = 12): verifying a tree's extra rows costs more than its extra tokens " \
           "repay. So each round is a chain of drafts: no tree" in view.banner
    assert f"Press **{REAL_TREE_BUTTON}** to run W = {REAL_TREE[0]}, N = {REAL_TREE[1]}" in view.banner
    assert "The walk steps to the child" not in view.banner                           # no tree banner for a chain
    final = list(h.run(tree_loader, Session(), defaults))[-1]
    assert "**The tree drafter ran the chain.** W = 1, N = 4" in final.status and REAL_TREE_BUTTON in final.status
    # the button's settings: the change restarts the step-through and the first round is a tree
    width, nodes, confidence = REAL_TREE
    tree = step(tree_loader, "draft", s, tree_form(tree_width=width, tree_nodes=nodes, confidence=confidence))
    assert "changed: the step-through restarted from the prompt" in tree.status and s.walk.shown.tree is not None
    assert not tree.real_tree and "The tree drafter" not in tree.banner              # as the learner set it
    costs["verify"] = [57.0, 2.75]                                                    # Zen 4-like: rows are cheap
    picked = step(tree_loader, "step", Session(), defaults)
    assert picked.banner.startswith("**The tree drafter's shape:** W = 3, N = 12: predicted ")
    assert "tok/s for the chain: its extra tokens repay verifying its extra rows" in picked.banner
    assert not picked.real_tree and picked.tree


def test_a_tree_round_with_room_for_one_token_is_a_plain_step(tree_loader):
    s = Session()
    view = step(tree_loader, "step", s, tree_form(max_new_tokens=1))
    assert len(s.walk.shown.tree.nodes) == 1 and s.walk.shown.next_kind == "plain"
    assert "nothing was drafted" in view.tests and tree_kinds(view)["plain"] == 1 and NAMES["plain"] in view.tree


@pytest.mark.parametrize("field,value", [
    ("k", 0), ("k", None), ("k", 2.5), ("temperature", 1e-45), ("top_k", -1), ("top_p", 1.5), ("seed", -1),
    ("max_new_tokens", 3.5), ("prompt", "  "), ("confidence", 1.0), ("draft_noise", None)])
def test_a_field_is_checked_alone_with_the_runs_own_check_and_words(loader, field, value):
    from specdec_ui.layout import _mistake
    problem = step(loader, "step", Session(), form(**{field: value}))
    assert _mistake(loader, field, value) == problem.message            # the run's message, word for word
    assert _mistake(loader, field, form()[field]) is None               # a value a run takes: no message


def test_the_field_check_covers_the_tree_fields_the_runs_and_the_prompts_length(loader, monkeypatch):
    import specdec_ui.state
    from specdec_ui.layout import _mistake
    assert _mistake(loader, "tree_width", 9).startswith("Tree width W (0 = this machine's choice) must be an integer")
    assert _mistake(loader, "tree_width", 2) is None
    (runs,) = list(h.compare(loader, Session(), form(), 6))
    assert _mistake(loader, "runs", 6) == runs.message and _mistake(loader, "runs", 2.0) is None
    monkeypatch.setattr(specdec_ui.state, "APP_PROMPT_TOKENS", 16)
    long = step(loader, "step", Session(), form(prompt=" ".join(["w1"] * 17)))
    assert _mistake(loader, "prompt", " ".join(["w1"] * 17)) == long.message
    assert _mistake(loader, "prompt", " ".join(["w1"] * 16)) is None


def test_a_message_and_the_alerts_about_it_go_once_the_field_holds_a_good_value(loader):
    import gradio as gr

    from specdec_ui.layout import _checked, _follow
    from specdec_ui.state import HINTS
    bad, fixed = _checked(loader, "top_p", 1.5), _checked(loader, "top_p", 1.0)
    assert bad["elem_classes"] == ["field-error"] and bad["info"] == "Top-p must be a number in (0, 1] (got 1.5)."
    assert fixed["elem_classes"] == [] and fixed["info"] == HINTS["top_p"]
    alert, about = _follow(loader, "top_p", 2.0, "top_p")              # another bad value: the alert says it
    assert about == "top_p" and alert.startswith("⚠ Top-p must be a number in (0, 1] (got 2.0).")
    assert _follow(loader, "top_p", 1.0, "top_p") == ("", None)         # fixed: the alert goes
    assert _follow(loader, "top_p", 1.0, "k") == (gr.skip(), gr.skip())  # an alert about another field stays


def test_a_token_of_backticks_or_whitespace_is_named_on_an_axis_and_small_numbers_keep_their_figures():
    assert [charts._label(t) for t in ("```", " ", "\n    ", "\t\t", "def", " x")] == [
        "3 backticks", "space", "newline, 4 spaces", "2 tabs", "'def'", "'·x'"]
    assert len(charts._label("\n " * 20)) == 24                                  # still short
    assert [charts.number(x) for x in (0.0042, 0.00042, 0.5, 0.0)] == ["0.004", "0.00042", "0.500", "0.000"]


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


def test_every_child_of_the_pages_tabs_is_a_tab():
    """A state made beside the tabs (inside gr.Tabs, outside every gr.Tab) drew a tab's label twice in the row."""
    import gradio as gr

    from specdec_ui.layout import build_demo
    demo = build_demo(Loader(ModelChoice()))
    tabs = [b for b in demo.blocks.values() if isinstance(b, gr.Tabs)]
    assert len(tabs) == 1 and [c.label for c in tabs[0].children] == ["Rule", "Step through", "Run", "Compare"]
    assert all(isinstance(c, gr.Tab) for c in tabs[0].children)


def test_a_fixed_field_without_a_hint_loses_its_message():
    """gradio reads info=None as "leave it": the prompt, which has no hint, kept its message once fixed."""
    from specdec_ui.layout import _hint
    assert _hint("prompt")["info"] == "" and _hint("prompt", "Prompt is empty.")["info"] == "Prompt is empty."
    assert _hint("k")["info"] == HINTS_K


HINTS_K = "most tokens the draft proposes per round, 1 to 32 (a tree: its depth)"
