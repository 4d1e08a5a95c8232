"""The Step through tab as plain functions on tiny random models (no real models, no browser): a round revealed
phase by phase, the rule sampled on one of its positions, a replayed trace, and a tree round's tree, tests
and mask."""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import replace

import pytest
from helpers.ui import (
    form,
    generation,
    html_text,
    shown_tokens,
    step,
    tree_form,
    visible_text,
)

from specdec import ModelChoice
from specdec.teach.render import DASH, output_text, plural, segments
from specdec.teach.render_tree import AGAINST, Q_RENORM, R_X, RATIO, TREE_HEADERS
from specdec.trace import REJECTED
from specdec_ui import charts, views
from specdec_ui.positions import SAMPLES, sample_positions
from specdec_ui.state import Loader, Session, Walkthrough
from specdec_ui.tabs import run as run_tab
from specdec_ui.tabs import step as step_tab
from specdec_ui.tabs.step import SampleView
from specdec_ui.tree_views import NAMES
from specdec_ui.views import Problem


def test_the_distribution_chart_puts_p_q_and_the_residual_on_one_token_axis(pair):
    rounds = generation(pair, seed=1).rounds
    r = next(r for r in rounds if r.rejected_at is not None)
    pos = r.positions[r.rejected_at]
    fig = charts.distribution_figure(r)
    p, q, residual = fig.data
    assert (p.name, q.name) == ("p (verifier)", "q (draft)") and residual.name.startswith("residual")
    assert list(p.x) == list(q.x) == list(residual.x)                       # one shared axis
    assert charts.token_label(pos.text) in p.x                                   # the drafted x is always on it
    i = list(p.x).index(charts.token_label(pos.text))
    assert q.y[i] == pytest.approx(pos.q) and p.y[i] == pytest.approx(pos.p)
    assert fig.layout.shapes and "drafted x" in fig.layout.annotations[0].text   # and highlighted
    assert f"β = Σ min(p, q) = {pos.beta:.2f}" in fig.layout.title.text
    expected = [max(0.0, c.p - c.q) / (1 - pos.beta) for c in pos.candidates]
    assert list(residual.y) == pytest.approx(expected)


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
    assert isinstance(step_tab.sample(s), Problem)
    for seed in range(10):
        step(loader, "accept", s, form(seed=seed, temperature=1.0))
        if s.walk.shown.tested:
            break
        step(loader, "reset", s, form(seed=seed))
    view = step_tab.sample(s)
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
    return {i + 1: bug_tv(pos) - tv_noise_bound(lumped(pos)[1], SAMPLES) for i, pos in enumerate(r.positions)
            if pos.tested}


def test_sample_takes_the_position_where_the_bug_lands_farthest_beyond_the_noise(close_loader):
    from specdec.teach.experiment import bug_tv
    s = decided_round(close_loader, lambda r: sum(p.tested for p in r.positions) == 3, k=3)
    r = s.walk.shown
    excess = beyond_the_noise(r)
    best = max(excess, key=excess.get)
    assert excess[best] > 0                                                   # tiny models: p and q spread out
    view = step_tab.sample(s)
    assert sampled_position(view) == best
    assert (f"the one where the argmax bug lands farthest beyond the noise: exactly {bug_tv(r.positions[best - 1]):.3f} "
            "from p in total variation, against a noise bound of") in view.summary
    bug = float(re.search(r"The bug.*total variation = \*\*([\d.]+)", view.summary).group(1))
    assert bug == pytest.approx(bug_tv(r.positions[best - 1]), abs=0.03)    # sampled, near the exact
    choices, default = sample_positions(s)
    assert default == best and [v for _, v in choices] == list(excess)
    labels = dict(map(reversed, choices))
    assert labels[best].endswith("(farthest beyond the noise)")
    assert all(("beyond the noise bound" in labels[i]) == (excess[i] > 0) for i in excess)
    assert "Step on" not in view.summary and "Why" not in view.summary       # nothing to excuse


def test_sample_at_temperature_0_says_the_bug_and_the_rule_coincide_and_never_advises_stepping_on(close_loader):
    s = decided_round(close_loader, lambda r: r.tested, k=3, temperature=0.0)
    view = step_tab.sample(s)
    assert "**At temperature 0 p and q are one-hot, each all on its argmax**" in view.summary
    assert "coincide exactly" in view.summary and "no round with these settings can show a difference" in view.summary
    assert "total variation = **0.000**" in view.summary and "set a temperature above 0" in view.summary
    assert "step on" not in view.summary.lower() and "another round" not in view.summary
    top_k_1 = decided_round(close_loader, lambda r: r.tested, k=3, temperature=1.0, top_k=1)
    assert "**At top-k 1 p and q are one-hot" in step_tab.sample(top_k_1).summary    # one-hot at any temperature
    lookup = decided_round(close_loader, lambda r: r.tested, k=3, temperature=1.0, drafter="lookup")
    assert "**The prompt-lookup drafter's q is one-hot" in step_tab.sample(lookup).summary  # and q alone, by construction
    assert "pick the drafter 'draft model'" in step_tab.sample(lookup).summary


def test_when_no_position_differs_beyond_the_noise_sample_says_so_and_offers_what_would(close_loader):
    # a prompt whose first draft the verifier's nucleus excludes: rejected, and the bug emits p exactly there
    s = decided_round(close_loader, lambda r: r.tested and all(e <= 0 for e in beyond_the_noise(r).values()), k=3,
                      temperature=1.0, top_p=0.05, prompt="w3 w4")
    r = s.walk.shown
    view = step_tab.sample(s)
    assert view.summary.startswith(f"**At no tested position of round {r.index + 1} does the argmax bug land off p "
                                   "by more than sampling noise can.**")
    assert "step another round, let p and q spread out (a higher temperature" in view.summary
    assert "the **Rule** tab" in view.summary
    assert all("within the noise bound" in label for label, _ in sample_positions(s)[0])


def test_sample_takes_a_picked_position_and_answers_a_bad_pick_with_a_problem(close_loader):
    s = decided_round(close_loader, lambda r: r.rejected_at == 1, k=3)         # kept, rejected, never tested
    other = 3 - sample_positions(s)[1]                                       # the position not taken by default
    picked = step_tab.sample(s, float(other))                                         # a whole float is the number
    assert isinstance(picked, SampleView) and sampled_position(picked) == other and "as picked" in picked.summary
    assert "the position that decided the round" in step_tab.sample(s, 2).summary
    for bad, said in ((99, "has no position 99"), (0, "has no position 0"), ("two", "Pick a position of round"),
                      (True, "Pick a position of round"), (3, "decided nothing (not tested: after the rejection)")):
        problem = step_tab.sample(s, bad)
        assert isinstance(problem, Problem) and said in problem.message, (bad, problem)
    assert isinstance(step_tab.sample(Session(), 1), Problem)                        # nothing decided yet


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
    assert "this forward / t(1) = 1.48 one-token forwards for K = 4 drafted tokens" in details and "v(K)" in details
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
    view = list(step_tab.step(loader, "draft", s, form(k=4, confidence=0.99), all_k=True))[-1]
    assert s.walk.shown.drafted == 4 and s.settings.decode.confidence == 0.0
    assert "Drafted K = 4 tokens." in view.explain                 # the draft text reads the confidence that ran
    s.replay = None
    again = list(step_tab.step(loader, "draft", s, form(k=4, confidence=0.99), all_k=False))[-1]
    assert "changed" in again.status                               # the override off is a new run, said so


def test_a_second_press_while_the_first_waits_for_the_models_runs_after_it(loader):
    import threading
    s = Session()
    views = {}

    def press(action):
        views[action] = list(step_tab.step(loader, action, s, form(k=4), True))[-1]
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


def test_step_reaches_the_end_and_says_so(loader):
    s = Session()
    for _ in range(20):
        view = step(loader, "step", s, form(max_new_tokens=3))
    assert "finished" in view.status
    assert sum(len(r.emitted) for r in s.walk.rounds) <= 3


def test_an_uploaded_trace_switches_the_step_through_to_it_at_once(loader, tmp_path):
    final = list(run_tab.run(loader, Session(), form(seed=5, temperature=0.9, max_new_tokens=8)))[-1]
    s = Session()
    for seed in range(10):                                        # a live round on show, its position sampled
        step(loader, "accept", s, form(seed=seed))
        if s.walk.shown.tested:
            break
        step(loader, "reset", s, form(seed=seed))
    assert isinstance(step_tab.sample(s), SampleView) and step_tab.replayed_step(s, final.download) is None  # nothing uploaded yet
    replayed = run_tab.replay(s, final.download)
    trace = s.replay
    v = step_tab.replayed_step(s, final.download)
    name = final.download.rsplit("/", 1)[-1]
    assert v.status.startswith(f"Replaying {name}: {plural(len(trace.rounds), 'round', 'rounds')} of the uploaded trace")
    assert (v.table, v.dist, v.ratio, v.explain) == ("", None, None, "") and "No tokens yet." in v.text  # the old round gone
    assert s.walk == Walkthrough() and step_tab.sample_is_stale(s) and sample_positions(s) == ([], None)
    offline = Loader(ModelChoice("embedded:none", None))
    first = step(offline, "step", s, replayed.form)               # its first round, with no "restarted" notice
    assert s.walk.rounds == trace.rounds[:1] and "changed" not in first.status
    bad = tmp_path / "bad.json"
    bad.write_text("not json", encoding="utf-8")
    assert isinstance(run_tab.replay(s, str(bad)), Problem) and step_tab.replayed_step(s, str(bad)) is None  # a refusal: as it was
    assert s.walk.rounds == trace.rounds[:1]


def test_a_session_says_when_it_waits_for_another_sessions_round(loader, pair):
    import threading
    s = Session()
    pair.lock.acquire()  # another session's round is in progress
    try:
        pressed = step_tab.step(loader, "step", s, form())
        assert next(pressed).status == views.WAITING
        threading.Timer(0.3, pair.lock.release).start()
        final = next(pressed)
    finally:
        if pair.lock.locked():
            pair.lock.release()
    assert final.status.startswith("Round 1: drafted, verified, decided and committed")


def test_temperature_zero_says_the_rule_has_nothing_to_decide(loader):
    view = step(loader, "accept", Session(), form(temperature=0.0))
    assert view.banner.startswith("**Temperature 0: the rule has nothing to decide.**")
    assert "At temperature 0 p and q are one-hot" in view.explain
    assert step(loader, "accept", Session(), form(temperature=0.8)).banner == ""


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
    assert isinstance(step_tab.sample(s), Problem)                                    # the chain's rule: not a tree's


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


def test_the_tree_drafter_says_which_shape_ran_and_why_and_offers_a_real_tree(tree_loader, monkeypatch):
    import specdec.decode.tree_shape
    from specdec_ui.tree_views import REAL_TREE, REAL_TREE_BUTTON
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
    final = list(run_tab.run(tree_loader, Session(), defaults))[-1]
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


def test_adaptive_k_is_said_off_while_all_k_is_ticked_and_said_ignored_by_a_drafter_it_does_not_pace(loader):
    s = Session()
    view = list(step_tab.step(loader, "draft", s, form(k=3, adaptive=True), all_k=True))[-1]
    assert step_tab.ADAPTIVE_OFF.strip() in view.status and s.settings.decode.adaptive is False
    view = list(step_tab.step(loader, "draft", Session(), form(k=3, adaptive=True, drafter="lookup"), all_k=False))[-1]
    assert "Adaptive K does not apply to the prompt lookup drafter" in view.status
    assert "Adaptive K does not apply" not in list(step_tab.step(loader, "draft", Session(), form(k=3, drafter="lookup"),
                                                                 all_k=False))[-1].status


def test_the_commit_text_says_the_rounds_draft_length_was_adaptive_ks_choice(pair):
    from helpers import tiny

    from specdec import DecodeConfig, Generation, make_drafter
    from specdec.decode.pacing import Pacer, RoundCosts
    from specdec.teach.render import explain
    target = tiny.model(3, scale=8)
    paced_pair = tiny.pair(target, tiny.noisy_copy(target, 5, 0.6))
    cfg = DecodeConfig(max_new_tokens=12, k=5, adaptive=True)
    gen = Generation(paced_pair, tiny.prompt_ids(seed=3), cfg, make_drafter("model", paced_pair),
                     pacer=Pacer(RoundCosts({1: 40.0, 7: 58.0}, draft=12.0, rest=2.0), 5, timed=False)).run()
    assert "by Adaptive K's choice" in explain(gen.rounds[0], "commit")
    plain = Generation(paced_pair, tiny.prompt_ids(seed=3), DecodeConfig(max_new_tokens=4),
                       make_drafter("model", paced_pair)).run()
    assert "Adaptive K" not in explain(plain.rounds[0], "commit")


def test_ticking_the_all_k_switch_is_said_as_the_switch_not_as_settings_the_learner_did_not_touch(loader):
    s = Session()
    list(step_tab.step(loader, "draft", s, form(k=4, confidence=0.6), all_k=True))
    again = list(step_tab.step(loader, "draft", s, form(k=4, confidence=0.6), all_k=False))[-1]
    assert f"**{step_tab.ALL_K_LABEL}** changed" in again.status and "Draft confidence" not in again.status
    moved = list(step_tab.step(loader, "draft", s, form(k=3, confidence=0.6), all_k=False))[-1]
    assert "K (drafted tokens per round)" in moved.status or "K " in moved.status
