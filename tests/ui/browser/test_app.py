"""Tier 2 of the app tests: the launched app with the embedded pair, driven in headless Chromium by
role and label, at a 1280x800 laptop size and at 400 px wide. The app's loader gets the pair the
``real_pair`` fixture already loaded (load_pair memoises per process), so the models load once per
test session. Screenshots go to test-artifacts/."""
from __future__ import annotations

import json
import re
import time

import pytest
from helpers.browser import (
    CONTRAST,
    FIB,
    FOCUS_BOX,
    LAPTOP,
    PHONE,
    ROUND_S,
    SKY,
    assert_chart_labels_fit,
    assert_controls_in_view,
    boxes_meet,
    expect,
    fill,
    inside,
    meet,
    open_app,
    status,
    tokens,
    visible_plots,
)

from specdec.teach.render_tree import (
    AGAINST,
    Q_RENORM,
    R_AFTER,
    R_X,
    TREE_HEADERS,
    VERDICT,
)
from specdec_ui.state import APP_PROMPT_TOKENS

pytestmark = [pytest.mark.browser, pytest.mark.real]


def test_a_fresh_page_is_truthful_and_results_sit_by_the_controls(page, artifacts):
    assert visible_plots(page) == 0                               # no empty plot boxes before there is data
    expect(page.get_by_text("Temperature 0: the rule has nothing to decide.")).to_have_count(0)
    hint = page.get_by_text("most tokens the draft proposes per round, 1 to 32")
    assert hint.evaluate(CONTRAST) >= 4.5                         # field hints are readable
    page.get_by_role("tab", name="Run").click()
    expect(page.get_by_role("button", name="Download trace (JSON)")).to_be_disabled()
    page.get_by_role("button", name="Stop run").click()           # nothing runs: the page says so
    expect(page.get_by_text("Nothing is running.")).to_be_visible()
    page.get_by_role("button", name="2 · One real round").click()  # Start here opens the tab, scrolled to it
    fill(page, k=3)
    page.get_by_role("button", name="Step round").click()
    expect(status(page, "Round 1: drafted, verified, decided and committed.")).to_be_visible()
    expect(page.get_by_text("Temperature 0: the rule has nothing to decide.")).to_be_visible()
    commit = page.get_by_text("Commit and roll back.", exact=True)
    # the status, the phase's paragraph and the table's caption, header and first row: readable without scrolling
    for what, seen in ((status(page, "Round 1: drafted"), 40), (commit, 20),
                       (page.get_by_role("table", name="Drafted tokens"), 80)):
        box = what.bounding_box()
        assert box["y"] + min(box["height"], seen) <= LAPTOP["height"], (what, box)
    expect(page.get_by_text("The test per drafted token")).to_be_visible()  # the charts appear with data
    assert visible_plots(page) == 2
    page.screenshot(path=artifacts / "app-step-1280x800.png")
    assert_controls_in_view(page, LAPTOP)
    page.screenshot(path=artifacts / "app-step-scrolled-1280x800.png")
    page.get_by_role("button", name="Reset", exact=True).click()
    expect(page.get_by_text("Reset: press Draft or Step round to begin.")).to_be_visible()
    expect(page.get_by_text("No tokens yet.").first).to_be_visible()  # nothing stale is left


def test_the_keyboard_reaches_the_step_buttons_by_the_start_here_path(browser, url):
    page = browser.new_context(viewport=LAPTOP).new_page()
    page.goto(url)
    expect(page.get_by_text("Ready:")).to_be_visible()
    # on a busy machine the page says Ready before its last buttons are drawn: a keyboard cannot reach those yet
    expect(page.get_by_role("button", name="2 · One real round")).to_be_visible()
    page.keyboard.press("Tab")
    skip = page.get_by_role("link", name="Skip to Start here")
    expect(skip).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.locator("#start-here-top")).to_be_focused()  # the link's target takes the focus

    def tab_to(words: str, most: int) -> None:
        passed = []
        for _ in range(most):
            page.keyboard.press("Tab")
            focused = page.evaluate("(e => [e.tagName, e.getAttribute('aria-label') || '',"
                                    " (e.innerText || e.value || '').trim()])(document.activeElement)")
            if focused[2] == words:
                return
            passed.append(focused)
        raise AssertionError(f"{words!r} not reached in {most} presses of Tab; focus went {passed}")
    tab_to("2 · One real round", 6)
    page.keyboard.press("Enter")                                   # opens Step through
    tab_to("Draft", 40)
    outline = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
    assert outline == "solid"                                     # a visible focus ring on the buttons
    page.keyboard.press("Enter")
    expect(page.get_by_text(re.compile(r"^Round 1: drafted\."))).to_be_visible()
    page.context.close()


def test_stepping_phase_by_phase_at_temperature_above_zero(page, artifacts):
    fill(page, temperature=0.8, k=4)
    table = page.get_by_role("table", name="Drafted tokens")
    page.get_by_role("button", name="Draft", exact=True).click()
    expect(status(page, "Round 1: drafted. Next: Verify.")).to_be_visible()
    expect(table.get_by_role("row")).to_have_count(5)             # header + K = 4 proposals
    expect(table.get_by_role("columnheader")).to_have_text(["#", "token", "q(x)", "conf."])
    expect(page.get_by_text(re.compile("the verifier has not run yet"))).to_be_visible()
    assert visible_plots(page) == 0
    page.get_by_role("button", name="Verify", exact=True).click()
    expect(status(page, "Round 1: drafted and verified. Next: Accept/reject.")).to_be_visible()
    expect(table.get_by_role("columnheader")).to_have_count(5)    # p(x) now, no verdict yet
    expect(page.get_by_text(re.compile(r"not rolled back yet"))).to_be_visible()
    page.get_by_role("button", name="Accept/reject", exact=True).click()
    expect(status(page, "Round 1: drafted, verified and decided. Next: Commit and roll back.")).to_be_visible()
    expect(table.get_by_role("columnheader")).to_have_count(8)
    expect(table.get_by_text(re.compile(r"^(kept|rejected) \(u")).first).to_be_visible()
    expect(page.get_by_text("The test per drafted token")).to_be_visible()
    expect(page.get_by_text("No tokens yet.").first).to_be_visible()  # decided, but nothing committed yet
    assert_chart_labels_fit(page, at_least=2)                     # p/q/residual and the test per token
    page.screenshot(path=artifacts / "app-step-accept.png", full_page=True)
    page.get_by_role("button", name="Commit and roll back", exact=True).click()
    expect(page.get_by_text("Commit and roll back.", exact=True)).to_be_visible()
    expect(page.get_by_text(re.compile(r"after the rollback\."))).to_be_visible()
    assert tokens(page)
    for n in range(2, 10):  # a round that left drafts untested: dashes and why, never numbers
        if page.locator("tr.row-unreached").count():
            break
        page.get_by_role("button", name="Step round").click()
        expect(status(page, f"Round {n}: drafted, verified, decided and committed.")).to_be_visible()
    row = page.locator("tr.row-unreached").first
    cells = row.locator("td").all_inner_texts()
    assert cells[3:6] == ["—", "—", "—"] and cells[6].startswith("not tested: after the rejection")
    page.get_by_text("Losslessness, seen: run the rule 10,000 times on this round").click()
    page.get_by_role("button", name="Sample 10,000 times").click()
    summary = page.get_by_text(re.compile(r"total variation from p = [\d.]+"))
    expect(summary).to_be_visible()
    tv = float(re.search(r"total variation from p = (\d+\.\d+)", summary.inner_text()).group(1))
    bug = float(re.search(r"total variation = (\d+\.\d+)", page.get_by_text(
        re.compile(r"The bug.*total variation = [\d.]+")).inner_text()).group(1))
    assert tv < 0.02, tv
    # the position taken is where the bug lands farthest beyond the sampling noise of 10,000 draws: clearly
    # farther from p than the rule
    assert bug > max(3 * tv, 0.04), (bug, tv)
    assert_chart_labels_fit(page, at_least=3)                     # and the histograms
    page.screenshot(path=artifacts / "app-step-sample.png", full_page=True)
    page.get_by_label("K (drafted tokens per round)").fill("3")   # a change mid-run is announced, not silent
    page.get_by_role("button", name="Step round").click()
    expect(page.get_by_text(re.compile(r"K \(drafted tokens per round\) changed: the step-through restarted from "
                                       r"the prompt \(\d+ rounds? on show discarded\)"))).to_be_visible()


def test_the_tree_drafter_draws_its_tree_its_sibling_tests_and_its_mask(page, artifacts):
    width = page.get_by_label("Tree width W (0 = this machine's choice)")
    expect(width).to_be_hidden()                                  # W and N belong to the tree drafter only
    page.get_by_role("radio", name="model, as a token tree").check()
    expect(width).to_be_visible()
    fill(page, temperature=0.8, k=3)
    width.fill("3")
    page.get_by_label("Tree nodes N (0 = this machine's choice)").fill("8")
    page.get_by_role("button", name="Step round").click()
    expect(status(page, "Round 1: drafted, verified, decided and committed.")).to_be_visible()
    title = page.get_by_text("Round 1: the token tree")
    expect(title).to_be_visible()
    tests = page.get_by_role("table", name="Sibling tests")
    expect(tests).to_be_visible()
    expect(tests.get_by_role("columnheader")).to_have_text(TREE_HEADERS)
    expect(tests.get_by_role("row").last).to_contain_text(re.compile(r"^then"))  # the token that ends the round
    mask = page.get_by_role("table", name="Tree attention mask")
    expect(mask).to_be_visible()
    drafted = int(re.search(r"(\d+) drafted", page.locator(".spec-tree .spec-note").first.text_content()).group(1))
    assert 1 <= drafted <= 8
    expect(mask.locator("tbody tr")).to_have_count(drafted + 1)   # the root and every node the figure counts
    expect(page.get_by_role("table", name="Drafted tokens")).to_have_count(0)  # the tree stands in for the chain's
    assert visible_plots(page) == 0
    boxes = [b.bounding_box() for b in page.locator(".spec-tree .tree-node rect").all()]
    assert len(boxes) >= drafted + 1                              # the root, the nodes and the token that ends it
    for i, a in enumerate(boxes):                                 # as drawn: no two node boxes meet
        for b in boxes[i + 1:]:
            assert not meet(a, b), (a, b)
    for g in page.locator(".spec-tree .tree-node").all():         # every token's text inside its box
        assert g.evaluate("g => [...g.querySelectorAll('text')].every(t => t.getBoundingClientRect().right <= "
                          "g.querySelector('rect').getBoundingClientRect().right + 0.5)")
    page.screenshot(path=artifacts / "app-step-tree.png", full_page=True)
    tests.screenshot(path=artifacts / "app-tree-tests-1280.png")
    page.set_viewport_size({"width": 400, "height": 800})         # each test a card: a label beside each value
    row = tests.locator("tbody tr").first
    row.scroll_into_view_if_needed()
    cell = {h: row.locator(f'td[data-label="{h}"]').bounding_box() for h in TREE_HEADERS[1:]}
    card = row.bounding_box()
    for h in (AGAINST, VERDICT, R_AFTER):                          # sentences: a line of their own
        assert cell[h]["width"] > 0.8 * card["width"], h
    assert cell[R_X]["y"] == cell[Q_RENORM]["y"] and cell[R_X]["x"] < cell[Q_RENORM]["x"]  # what the ratio divides
    tests.screenshot(path=artifacts / "app-tree-tests-400.png")


def sample_round(pg, narrow: bool, n_max=20) -> int:
    """Step rounds at temperature 0.8 until the picker offers a position where the bug lands beyond the noise;
    the round's number. ``narrow``: the sidebar starts closed and is closed again after filling it."""
    if narrow:
        pg.get_by_role("button", name="Toggle Sidebar").click()
    fill(pg, temperature=0.8, k=4, max_new_tokens=48)
    if narrow:
        pg.get_by_role("button", name="Toggle Sidebar").click()
    pg.get_by_text("Losslessness, seen: run the rule 10,000 times on this round").click()  # open: its picker drawn
    picker = pg.get_by_label("Position to sample (the round's tested positions)")
    for n in range(1, n_max):  # the seed is fixed, but the drafts depend on this machine's precision
        pg.get_by_role("button", name="Step round").click()
        expect(status(pg, f"Round {n}: drafted, verified, decided and committed.")).to_be_visible()
        pg.wait_for_timeout(500)                                  # the picker is filled after the round is shown
        if "(farthest beyond the noise)" in picker.input_value():
            return n
    pytest.fail("no round with a position where the bug lands beyond the noise")


def check_sample_beyond_the_noise(pg, artifacts, viewport, name):
    n = sample_round(pg, viewport is PHONE)
    picker = pg.get_by_label("Position to sample (the round's tested positions)")
    chosen = int(re.match(r"(\d+):", picker.input_value()).group(1))
    pg.get_by_role("button", name="Sample 10,000 times").click()
    head = pg.get_by_text(re.compile(rf"Round {n}, position {chosen} \(drafted .*: of the round's tested positions, "
                                     r"the one where the argmax bug lands farthest beyond the noise"))
    expect(head).to_be_visible()
    exact, bound = map(float, re.search(r"exactly ([\d.]+) from p in total variation, against a noise bound of "
                                        r"([\d.]+)", head.inner_text()).groups())
    assert exact > bound                                          # what "beyond the noise" means, stated
    chart = pg.locator(".js-plotly-plot").last                    # the sample's, below the round's own charts
    legend = chart.locator(".legendtext")
    expect(legend.filter(has_text=re.compile(r"^the rule: TV"))).to_have_count(1)      # both histograms, against p
    expect(legend.filter(has_text=re.compile(r"^argmax draft bug: TV"))).to_have_count(1)
    expect(legend.filter(has_text="p (verifier)")).to_have_count(1)
    expect(legend.filter(has_text=f"noise bound {bound:.3f}: what sampling alone may give")).to_have_count(1)
    expect(chart.locator(".y2tick text").filter(has_text="the bug")).to_have_count(1)  # the TVs on one axis
    assert_chart_labels_fit(pg, at_least=3)
    assert pg.evaluate("document.documentElement.scrollWidth") <= viewport["width"]
    chart.scroll_into_view_if_needed()
    pg.screenshot(path=artifacts / f"app-sample-beyond-the-noise-{name}.png")
    picker.click()
    others = pg.get_by_role("option").filter(has_not_text=re.compile(rf"^\W*{chosen}: '"))  # a tick may lead
    if not others.count():                                        # one tested position: nothing else to pick
        return
    others.first.click()
    other = int(re.match(r"(\d+):", picker.input_value()).group(1))
    pg.get_by_role("button", name="Sample 10,000 times").click()
    expect(pg.get_by_text(re.compile(rf"Round {n}, position {other} \(drafted .*\), as picked")).first).to_be_visible()


def test_the_losslessness_view_at_temperature_0_8_takes_the_position_beyond_the_noise_at_1280(page, artifacts):
    check_sample_beyond_the_noise(page, artifacts, LAPTOP, "1280x800")


def test_the_losslessness_view_at_temperature_0_8_takes_the_position_beyond_the_noise_at_400_px(browser, url,
                                                                                                artifacts):
    pg = open_app(browser, url, PHONE)
    try:
        check_sample_beyond_the_noise(pg, artifacts, PHONE, "400px")
    finally:
        pg.context.close()


def test_at_temperature_0_the_losslessness_view_says_why_the_bug_cannot_differ(page):
    fill(page, temperature=0, k=4)
    page.get_by_role("button", name="Step round").click()
    expect(status(page, "Round 1: drafted, verified, decided and committed.")).to_be_visible()
    page.get_by_text("Losslessness, seen: run the rule 10,000 times on this round").click()
    page.get_by_role("button", name="Sample 10,000 times").click()
    expect(page.get_by_text(re.compile(r"At temperature 0 p and q are one-hot")).first).to_be_visible()
    expect(page.get_by_text(re.compile(r"the bug and the rule coincide exactly")).first).to_be_visible()
    expect(page.get_by_text(re.compile(r"step on", re.I)).filter(visible=True)).to_have_count(0)


def test_the_tree_drafter_at_its_defaults_says_why_it_ran_the_chain_and_draws_a_real_tree_in_one_click(
        page, artifacts, monkeypatch):
    import specdec.decode.tree_shape
    # an AVX2-like machine, where verifying rows is dear: the cost fit picks the chain whatever this machine is
    monkeypatch.setattr(specdec.decode.tree_shape, "machine_costs", lambda pair: {"verify": [130.0, 16.0],
                                                                           "draft": [39.0, 5.0], "round": 40.0})
    page.get_by_role("radio", name="model, as a token tree").check()
    fill(page, temperature=0.8, k=6, max_new_tokens=48)                        # W and N stay 0: this machine's choice
    page.get_by_role("button", name="Step round").click()
    expect(status(page, "Round 1: drafted, verified, decided and committed.")).to_be_visible()
    expect(page.get_by_text(re.compile(r"The tree drafter ran the chain\. W = 1, N = 6, the chain: predicted [\d.]+ "
                                       r"tok/s for it on a quiet machine, from this machine's timed forwards and rounds .* the verifier "
                                       r"forward \d+ ms = 130 \+ 16\.0 ms per row"))
           ).to_be_visible()
    expect(page.get_by_role("table", name="Drafted tokens")).to_be_visible()  # a chain round: no tree
    button = page.get_by_role("button", name="Draw a real tree")
    expect(button).to_be_visible()
    page.screenshot(path=artifacts / "app-tree-defaults-chain.png", full_page=True)
    button.click()
    expect(page.get_by_label("Tree width W (0 = this machine's choice)")).to_have_value("2")
    expect(page.get_by_label("Tree nodes N (0 = this machine's choice)")).to_have_value("8")
    expect(status(page, "Round 1: drafted. Next: Verify.")).to_be_visible()
    expect(page.get_by_text(re.compile(r"changed: the step-through restarted from the prompt"))).to_be_visible()
    expect(button).to_be_hidden()
    starts = "svg => Math.max(...Object.values([...svg.querySelectorAll('path')].reduce((n, p) => { " \
             "const k = p.getAttribute('d').split(' ')[0]; n[k] = (n[k] || 0) + 1; return n; }, {})))"
    tree = page.get_by_role("group", name=re.compile(r"^Token tree, round"))
    for n in range(1, 8):  # a drafted node with two children: two edges leave one box (before the verdicts add one)
        expect(tree).to_be_visible()
        if tree.evaluate(starts) > 1:
            break
        page.get_by_role("button", name="Step round").click()
        expect(status(page, f"Round {n}: drafted, verified, decided and committed.")).to_be_visible()
        page.get_by_role("button", name="Draft", exact=True).click()
        expect(status(page, f"Round {n + 1}: drafted. Next: Verify.")).to_be_visible()
    else:
        pytest.fail("no round drafted a node with two children")
    page.screenshot(path=artifacts / "app-tree-real.png", full_page=True)


def test_the_run_keeps_the_exact_layout_of_code_marks_every_kind_and_replays(page, artifacts, tmp_path):
    page.get_by_role("tab", name="Run").click()
    for seed in range(4):  # a run whose rejected drafts include a line break
        fill(page, temperature=0.8, max_new_tokens=64)
        page.get_by_label("Seed").fill(str(seed))
        page.get_by_role("button", name="Run", exact=True).click()
        expect(page.get_by_text(re.compile(r"^Finished \("))).to_be_visible()
        if page.locator(".spec-tokens del.tok-rejected .nl").count():
            break
    drafts = page.locator(".spec-tokens del.tok-rejected")
    assert page.locator(".spec-tokens del.tok-rejected .nl").count(), "no rejected line break in 4 seeds"
    page.get_by_text("Plain text (Copy copies").filter(visible=True).first.click()
    plain = page.locator("#run-plain pre").text_content()
    text = page.locator(".spec-tokens").filter(visible=True).first
    # by default a rejected draft is a pin on the boundary it lost: no width, its text not in the line
    assert text.inner_text() == plain                             # the text reads as the output, exactly
    assert all(d.bounding_box() is None or d.bounding_box()["width"] < 0.5 for d in drafts.all())
    assert all("gradient" in d.evaluate("e => getComputedStyle(e, '::before').backgroundImage") for d in drafts.all())
    drafts.first.focus()                                          # and tells its story on focus
    assert "not in the output; the token after it took its place" in drafts.first.evaluate(FOCUS_BOX)
    whitespace = page.locator("#run-plain .sp").first              # real whitespace, markers on request
    assert whitespace.evaluate("e => getComputedStyle(e, '::before').content") == "none"
    page.get_by_label("show whitespace as · → ↵").check()
    page.wait_for_function("document.body.classList.contains('show-whitespace')")
    assert whitespace.evaluate("e => getComputedStyle(e, '::before').content") == '"·"'
    assert page.locator("#run-plain pre").inner_text() == plain  # what Copy copies: the text, no markers
    page.get_by_label("show whitespace as · → ↵").uncheck()
    page.get_by_role("radio", name="inline").check()              # inline: struck through, small, apart
    page.wait_for_function("document.body.classList.contains('rejected-inline')")
    assert all("\n" not in t for t in drafts.all_inner_texts())   # a draft adds no line break
    shown = tokens(page)
    styles = {t.get_attribute("class"): t.evaluate(
        "e => { const s = getComputedStyle(e); return [s.backgroundColor, parseFloat(s.borderBottomWidth) ? "
        "s.borderBottomStyle : 'none', s.textDecorationLine] }")
        for t in shown}
    cues = {"tok tok-accepted": "solid", "tok tok-resampled": "dashed", "tok tok-bonus": "double",
            "tok tok-plain": "none"}  # verifier only (a round with nothing drafted): the one kind without a mark
    for cls, (_, border, decoration) in styles.items():  # a second cue besides colour for every other kind
        assert border == cues[cls] if cls in cues else "line-through" in decoration, (cls, border, decoration)
    page.get_by_role("radio", name="as markers").check()
    page.wait_for_function("!document.body.classList.contains('rejected-inline')")
    assert all(t.evaluate(CONTRAST) >= 4.5 for t in shown[:10])
    shown[0].focus()                                              # focus shows the token's story
    assert "round 1, position 1" in shown[0].evaluate(FOCUS_BOX)
    assert "round 1, position 1" in shown[0].get_attribute("aria-label")  # and screen readers read it
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.classList.contains('tok')")  # every token is a tab stop
    expect(page.get_by_text(re.compile(r"tok/s decoding = \d+ tokens / [\d.]+ s of this session's compute"))
           ).to_be_visible()
    expect(page.get_by_text(re.compile(r"verifier passes = one per round \+ one over the prompt"))).to_be_visible()
    expect(page.get_by_text(re.compile("can vary by tens of percent"))).to_be_visible()
    expect(page.get_by_text("Time per round by phase", exact=True)).to_be_visible()
    assert_chart_labels_fit(page, at_least=4)
    page.screenshot(path=artifacts / "app-run.png", full_page=True)
    with page.expect_download() as download:
        page.get_by_role("button", name="Download trace (JSON)").click()
    trace = tmp_path / "trace.json"
    download.value.save_as(trace)
    page.get_by_label("Seed").fill("77")                          # the replay restores the run's settings
    with page.expect_file_chooser() as chooser:
        page.get_by_role("button", name="Click to upload or drop files").click()
    chooser.value.set_files(str(trace))
    expect(page.get_by_text(re.compile(r"^Replayed a trace of \d+ rounds"))).to_be_visible()
    expect(page.get_by_label("Seed")).to_have_value(str(seed))
    page.get_by_role("tab", name="Step through").click()           # and it steps through, with no models
    page.get_by_role("button", name="Step round").click()
    expect(page.get_by_text(re.compile(r"Replaying the uploaded trace \(no models run\)"))).to_be_visible()
    page.get_by_role("tab", name="Run").click()
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"\xff\xfe\x00 not a trace")
    page.locator("button[aria-label='Clear']").first.click()
    with page.expect_file_chooser() as chooser:
        page.get_by_role("button", name="Click to upload or drop files").click()
    chooser.value.set_files(str(bad))
    message = page.get_by_text(re.compile(r"^Could not replay: bad\.bin: not a specdec trace file \(not UTF-8"))
    expect(message).to_be_visible()
    upload = page.get_by_text("Replay a downloaded trace (no models needed)")
    assert abs(message.bounding_box()["y"] - upload.bounding_box()["y"]) < 300     # at the upload box
    expect(page.get_by_text(re.compile(r"^Replayed a trace of \d+ rounds"))).to_be_visible()  # and nothing lost
    data = json.loads(trace.read_text(encoding="utf-8"))          # a shared trace with one hostile field
    data["rounds"][0]["positions"][0]["p"] = "abc"
    hostile = tmp_path / "hostile.json"
    hostile.write_text(json.dumps(data), encoding="utf-8")
    page.locator("button[aria-label='Clear']").first.click()
    with page.expect_file_chooser() as chooser:
        page.get_by_role("button", name="Click to upload or drop files").click()
    chooser.value.set_files(str(hostile))
    said = page.get_by_text(re.compile(r"^Could not replay: hostile\.json: not a specdec trace file: "
                                       r"rounds\[0\]\.positions\[0\]\.p must be a number in \[0, 1\] \(got 'abc'\)"))
    expect(said).to_be_visible()                                  # the field and its rule, at the upload box
    assert abs(said.bounding_box()["y"] - upload.bounding_box()["y"]) < 300
    expect(page.get_by_text(re.compile(r"^Replayed a trace of \d+ rounds"))).to_be_visible()  # still nothing lost


def test_an_uploaded_trace_switches_the_step_through_to_it_at_once(page, artifacts, tmp_path):
    fill(page, temperature=0.8, k=4, max_new_tokens=12)
    page.get_by_role("button", name="Step round").click()         # a live round on show, its position sampled
    expect(status(page, "Round 1: drafted, verified, decided and committed.")).to_be_visible()
    page.get_by_text("Losslessness, seen: run the rule 10,000 times on this round").click()
    page.get_by_role("button", name="Sample 10,000 times").click()
    expect(page.get_by_text(re.compile(r"total variation from p = [\d.]+"))).to_be_visible()
    page.get_by_role("tab", name="Run").click()
    page.get_by_role("button", name="Run", exact=True).click()
    expect(page.get_by_text(re.compile(r"^Finished \("))).to_be_visible()
    with page.expect_download() as download:
        page.get_by_role("button", name="Download trace (JSON)").click()
    trace = tmp_path / "fib-trace.json"
    download.value.save_as(trace)
    rounds = len(json.loads(trace.read_text(encoding="utf-8"))["rounds"])
    with page.expect_file_chooser() as chooser:
        page.get_by_role("button", name="Click to upload or drop files").click()
    chooser.value.set_files(str(trace))
    expect(page.get_by_text(re.compile(r"^Replayed a trace of \d+ rounds"))).to_be_visible()
    page.get_by_role("tab", name="Step through").click()            # switched at once: the old round is gone
    expect(status(page, f"Replaying fib-trace.json: {rounds} rounds of the uploaded trace")).to_be_visible()
    expect(page.get_by_role("table", name="Drafted tokens")).to_have_count(0)
    expect(page.get_by_text("No tokens yet.").first).to_be_visible()
    assert visible_plots(page) == 0                                 # its charts and the old sample's too
    expect(page.get_by_text(re.compile(r"^After Accept/reject, this runs the rule"))).to_be_visible()
    expect(page.get_by_label("Position to sample (the round's tested positions)")).to_have_value("")
    page.screenshot(path=artifacts / "app-step-replay-switched.png", full_page=True)
    page.get_by_role("button", name="Step round").click()           # and steps through the trace, no models run
    expect(page.get_by_text(re.compile(r"^Replaying the uploaded trace \(no models run\), \d+ rounds\. Round 1: "))
           ).to_be_visible()
    expect(page.get_by_text(re.compile(r"changed: the step-through restarted"))).to_have_count(0)


def gap_above(field, message, settle_s: float = 5.0) -> float:
    """How far ``message``'s top lies above ``field``'s, both read in one frame (two separate reads
    straddled a scroll once); read again while the page is still moving, for at most ``settle_s``."""
    both = "([a, b]) => [a.getBoundingClientRect().top, b.getBoundingClientRect().top]"
    handles = [field.element_handle(), message.element_handle()]
    last, deadline = None, time.monotonic() + settle_s
    while True:
        tops = field.page.evaluate(both, handles)
        if tops == last or time.monotonic() > deadline:
            return tops[0] - tops[1]
        last = tops
        field.page.wait_for_timeout(100)


def test_a_bad_value_shows_its_message_at_the_field_until_it_is_fixed(page, artifacts):
    fill(page, k=2)
    page.get_by_role("button", name="Step round").click()
    expect(status(page, "Round 1: drafted, verified, decided and committed.")).to_be_visible()
    k = page.get_by_label("K (drafted tokens per round)")
    for value, message in (("2.5", "K (drafted tokens per round) must be a whole number (got 2.5)."),
                           ("", "K (drafted tokens per round) is empty: enter an integer in [1, 32]."),
                           ("0", "K (drafted tokens per round) must be an integer in [1, 32] (got 0).")):
        k.fill(value)
        page.get_by_role("button", name="Step round").click()
        shown = page.locator(".field-error").get_by_text(message)
        expect(shown).to_be_visible()
        assert 0 < gap_above(k, shown) < 120                           # right above its input
        expect(status(page, "Round 1: drafted, verified, decided and committed.")).to_be_visible()  # nothing lost
    page.screenshot(path=artifacts / "app-invalid.png")
    k.fill("2")
    expect(page.locator(".field-error")).to_have_count(0)         # fixed: the message goes at once
    page.get_by_role("button", name="Step round").click()
    expect(status(page, "Round 2: drafted, verified, decided and committed.")).to_be_visible()


def test_a_long_prompt_is_refused_and_stop_works_during_a_long_prefill(page):
    page.get_by_role("tab", name="Run").click()
    fill(page, prompt="word " * (APP_PROMPT_TOKENS + 500))
    page.get_by_role("button", name="Run", exact=True).click()
    expect(page.locator(".field-error").get_by_text(
        re.compile(rf"^Prompt must be at most {APP_PROMPT_TOKENS} tokens in the app"))).to_be_visible()
    fill(page, prompt="word " * (APP_PROMPT_TOKENS - 100))
    page.get_by_role("button", name="Run", exact=True).click()
    expect(page.get_by_text("Reading the prompt (the prefill)...")).to_be_visible()
    page.get_by_role("button", name="Stop run").click()
    expect(page.get_by_text("Stopped after 0 rounds.")).to_be_visible(timeout=30_000)  # one prefill chunk, not all


def test_side_by_side_at_temperature_zero_is_identical_and_says_why(page, artifacts):
    page.get_by_role("radio", name="prompt lookup").check()       # lookup copies the prompt, never its template
    fill(page, prompt="Repeat after me: the quick brown fox jumps over the lazy dog.", max_new_tokens=12)
    page.get_by_role("button", name="Step round").click()
    expect(status(page, "Round 1: drafted, verified, decided and committed.")).to_be_visible()
    page.get_by_role("button", name="Step round").click()  # a click while one is pending is ignored: wait
    expect(status(page, "Round 2: drafted, verified, decided and committed.")).to_be_visible()
    assert not any("<|" in t or "im_start" in t for t in page.locator(".spec-tokens .tok").all_inner_texts())
    page.get_by_role("radio", name="draft model").check()
    page.get_by_role("tab", name="Compare").click()
    fill(page, max_new_tokens=12)
    page.get_by_role("button", name="Run both").click()
    expect(page.get_by_text("Identical output")).to_be_visible(timeout=4 * ROUND_S)
    expect(page.get_by_text(re.compile(r"^Speed-up [\d.]+x = the verifier-only run's time per token"))).to_be_visible()
    expect(page.get_by_text("Tokens against compute time", exact=True)).to_be_visible()
    expect(page.get_by_text(re.compile(r"^Why [\d.]+x\? A speculative round gave [\d.]+ tokens"))).to_be_visible()
    expect(page.get_by_text("Predicted speed-up over K", exact=True)).to_be_visible()
    page.get_by_text("Each output as plain text, to copy").click()
    base, spec = page.locator("#verifier-only-text pre").inner_text(), page.locator("#speculative-text pre").inner_text()
    assert base == spec != ""
    assert_chart_labels_fit(page, at_least=2)                     # the race and the predicted speed-up
    page.screenshot(path=artifacts / "app-compare.png", full_page=True)


def show_sidebar(pg, shown: bool) -> None:
    """Open or close the settings sidebar, whichever way it is now: a page resized keeps its own."""
    prompt = pg.get_by_role("textbox", name=re.compile(r"^Prompt"))  # off the left edge while closed
    if (prompt.bounding_box()["x"] >= 0) != shown:
        pg.get_by_role("button", name="Toggle Sidebar").click()
        pg.wait_for_timeout(500)                                  # the sidebar slides
    assert (prompt.bounding_box()["x"] >= 0) == shown


def test_compare_shows_its_verdict_as_a_badge_and_the_outputs_token_for_token(page, artifacts):
    page.get_by_role("tab", name="Compare").click()
    fill(page, max_new_tokens=32)
    page.get_by_role("button", name="Run both").click()
    verdict = page.get_by_role("status").filter(has_text="Identical output")
    expect(verdict).to_be_visible(timeout=4 * ROUND_S)
    n = int(re.search(r"Identical output: (\d+) of \1 tokens", verdict.inner_text()).group(1))
    assert n > 0
    expect(page.get_by_text(f"The same {n} tokens in both outputs, shown once:")).to_be_visible()
    for part in (verdict.locator("strong"), verdict.locator(".cmp-verdict-detail")):
        assert part.evaluate(CONTRAST) >= 4.5                     # WCAG AA on the badge's fill
    page.get_by_text("Each output as plain text, to copy").click()
    same = page.locator(".cmp-same").inner_text()
    assert same == page.locator("#verifier-only-text pre").inner_text() == page.locator("#speculative-text pre").inner_text()
    page.screenshot(path=artifacts / "compare-identical.png", full_page=True)
    page.set_viewport_size(PHONE)
    show_sidebar(page, False)                                     # as a phone has it
    verdict.scroll_into_view_if_needed()
    expect(verdict).to_be_in_viewport()
    assert inside(verdict.bounding_box(), PHONE)
    assert page.evaluate("() => document.documentElement.scrollWidth") <= PHONE["width"]
    page.screenshot(path=artifacts / "compare-identical-400.png")

    page.set_viewport_size(LAPTOP)                                # sampling: the outputs column by column
    show_sidebar(page, True)
    fill(page, temperature=1, max_new_tokens=16)
    page.get_by_role("button", name="Run both").click()
    expect(page.get_by_role("status").filter(has_text="Sampling: outputs differ by design")).to_be_visible(
        timeout=4 * ROUND_S)
    first = page.locator("#aligned-outputs .al-first")
    expect(first).to_have_count(1)
    for col in page.locator("#aligned-outputs .al-col").all():  # a position's tokens one under another
        lefts = [c.bounding_box()["x"] for c in col.locator(".al-cell").all()]
        assert len(lefts) == 2 and lefts[0] == lefts[1]
    page.screenshot(path=artifacts / "compare-sampled.png", full_page=True)
    page.set_viewport_size(PHONE)
    show_sidebar(page, False)
    first.scroll_into_view_if_needed()
    assert inside(page.locator("#aligned-outputs").bounding_box(), PHONE)
    page.screenshot(path=artifacts / "compare-sampled-400.png")


def test_at_400_px_every_tab_shows_messages_are_seen_and_nothing_runs_off_the_edge(browser, url, artifacts):
    pg = open_app(browser, url, PHONE)
    wide = "() => document.documentElement.scrollWidth"
    try:
        for name in ("Step through", "Run", "Compare"):
            box = pg.get_by_role("tab", name=name).bounding_box()
            assert box and inside(box, PHONE), name
        expect(pg.get_by_role("textbox", name=re.compile(r"^Prompt"))).not_to_be_in_viewport()  # the sidebar starts closed
        toggle, legend = pg.get_by_role("button", name="Toggle Sidebar"), pg.locator(".spec-legend")
        assert not meet(toggle.bounding_box(), legend.bounding_box())
        legend.evaluate("e => e.scrollIntoView({block: 'start'})")  # the toggle stays put as the page scrolls
        assert not meet(toggle.bounding_box(), legend.bounding_box())
        pg.evaluate("window.scrollTo(0, 0)")
        about = pg.get_by_role("button", name="Models, precision and parameter counts")
        arrow, label = about.locator(".icon").bounding_box(), about.locator("span").first.bounding_box()
        assert arrow["width"] >= 8 and inside(arrow, PHONE) and not meet(arrow, label)  # its arrow is seen
        cdp = pg.context.new_cdp_session(pg)                      # each step button's label in one font, not two
        root = cdp.send("DOM.getDocument")["root"]["nodeId"]
        cdp.send("CSS.enable")
        for node in cdp.send("DOM.querySelectorAll", {"nodeId": root, "selector": ".step-b"})["nodeIds"]:
            assert len(cdp.send("CSS.getPlatformFontsForNode", {"nodeId": node})["fonts"]) == 1
        assert pg.get_by_role("button", name="Step round").evaluate(CONTRAST) >= 4.5
        pg.get_by_role("button", name="Toggle Sidebar").click()
        fill(pg, temperature=0.8, max_new_tokens=12, k=0)
        pg.get_by_role("button", name="Toggle Sidebar").click()
        pg.get_by_role("button", name="Step round").click()      # a bad value opens the sidebar at its message
        shown = pg.locator(".field-error").get_by_text(re.compile(r"^K \(drafted tokens per round\) must be"))
        expect(shown).to_be_in_viewport()
        pg.get_by_label("K (drafted tokens per round)").fill("4")
        pg.get_by_role("button", name="Toggle Sidebar").click()
        pg.get_by_role("button", name="Accept/reject", exact=True).click()
        expect(pg.get_by_role("table", name="Drafted tokens").get_by_role("columnheader")).to_have_count(8)
        assert pg.evaluate(wide) <= PHONE["width"]               # the table scrolls inside its box, not the page
        pg.screenshot(path=artifacts / "app-step-400px.png", full_page=True)
        assert_controls_in_view(pg, PHONE)
        pg.screenshot(path=artifacts / "app-step-scrolled-400px.png")
        assert_chart_labels_fit(pg, at_least=2)
        pg.get_by_role("tab", name="Run").click()
        for name in ("Run", "Stop run"):  # white on the primary and stop buttons: WCAG AA
            assert pg.get_by_role("button", name=name, exact=True).evaluate(CONTRAST) >= 4.5, name
        pg.get_by_role("button", name="Run", exact=True).click()
        expect(pg.get_by_text(re.compile(r"^Finished \("))).to_be_visible()
        pg.wait_for_timeout(1000)
        plots = [p for p in pg.locator(".js-plotly-plot").all() if p.is_visible()]
        boxes = [p.bounding_box() for p in plots]
        # the run's five charts and the confidence section's two (every run of fill() drafts at confidence 0)
        assert len(boxes) == 7 and len({round(b["x"]) for b in boxes}) == 1  # one plot per row
        assert all(b["x"] + b["width"] <= PHONE["width"] + 1 for b in boxes)
        assert_chart_labels_fit(pg, at_least=4)                  # every label inside its chart, none meeting
        assert pg.evaluate(wide) <= PHONE["width"]
        pg.screenshot(path=artifacts / "app-run-400px.png", full_page=True)
        pg.get_by_role("tab", name="Compare").click()
        for name in ("Run both", "Stop comparison"):               # whole, and their labels inside them
            button = pg.get_by_role("button", name=name)
            assert inside(button.bounding_box(), PHONE), name
            assert button.evaluate("b => b.scrollWidth <= b.clientWidth"), name
    finally:
        pg.context.close()


def test_two_sessions_stepping_at_once_keep_separate_state(browser, url, artifacts):
    a, b = open_app(browser, url), open_app(browser, url)
    try:
        fill(a, prompt=FIB, k=3)
        fill(b, prompt=SKY, k=2)
        a.get_by_role("button", name="Step round").click()
        b.get_by_role("button", name="Step round").click()  # both rounds in flight together
        for pg in (a, b):
            expect(status(pg, "Round 1: drafted, verified, decided and committed.")).to_be_visible()
        a.get_by_role("button", name="Step round").click()
        b.get_by_role("button", name="Draft", exact=True).click()
        expect(status(a, "Round 2: drafted, verified, decided and committed.")).to_be_visible()
        expect(status(b, "Round 2: drafted. Next: Verify.")).to_be_visible()
        expect(a.get_by_role("table", name="Drafted tokens").get_by_role("row")).to_have_count(4)  # K = 3
        expect(b.get_by_role("table", name="Drafted tokens").get_by_role("row")).to_have_count(3)  # K = 2
        a_text = [t.inner_text() for t in tokens(a)]
        b_text = [t.inner_text() for t in tokens(b)]
        assert a_text and b_text and a_text != b_text
        a.screenshot(path=artifacts / "app-session-a.png", full_page=True)
        b.screenshot(path=artifacts / "app-session-b.png", full_page=True)
    finally:
        a.context.close()
        b.context.close()


ALERT = ".block.spec-alert"  # the alert by a tab's buttons (its prose inside has the class too)
# Where each line of a text box starts, in characters from its left edge, and whether a line break
# ("\n") ends the line before it: a soft-wrapped line is one whose previous line ended without one.
LINE_STARTS = """box => {
  const left = box.getBoundingClientRect().left + parseFloat(getComputedStyle(box).paddingLeft);
  const walker = document.createTreeWalker(box, NodeFilter.SHOW_TEXT), range = document.createRange();
  const lines = []; let broke = true, top = null;
  for (let node = walker.nextNode(); node; node = walker.nextNode())
    for (let i = 0; i < node.length; i++) {
      const ch = node.data[i];
      if (ch === '\\n') { broke = true; continue; }
      range.setStart(node, i); range.setEnd(node, i + 1);
      const r = range.getClientRects()[0];
      if (!r || r.width === 0) continue;
      if (top === null || r.top > top + r.height / 2) { lines.push({x: r.left - left, soft: !broke, ch: r.width}); top = r.top; }
      broke = false;
    }
  return lines; }"""


def test_a_fixed_field_clears_its_message_and_every_alert_about_it_with_no_toast(page, artifacts):
    prompt, top_p = page.get_by_role("textbox", name=re.compile(r"^Prompt")), page.get_by_label("Top-p")
    page.get_by_role("tab", name="Run").click()
    fill(page, temperature=0.8)
    top_p.fill("1.5")
    said = "Top-p must be a number in (0, 1] (got 1.5)."
    at_field = page.locator(".field-error").get_by_text(said)
    expect(at_field).to_be_visible()                                   # checked as it is typed, in the run's words
    page.get_by_role("button", name="Run", exact=True).click()
    alert = page.locator(ALERT).filter(has_text=said)
    expect(alert).to_be_visible()                                      # the pointer by the buttons
    page.get_by_role("tab", name="Step through").click()
    page.get_by_role("button", name="Step round").click()
    expect(page.locator(ALERT).filter(has_text=said)).to_have_count(2)
    expect(at_field).to_have_count(1)                                  # one message at the field, not one per press
    expect(page.locator(".toast-body")).to_have_count(0)               # no toasts piling up
    page.screenshot(path=artifacts / "app-message-shown.png")
    top_p.fill("2.5")                                                  # still wrong: the message follows the value
    expect(page.locator(".field-error").get_by_text("Top-p must be a number in (0, 1] (got 2.5).")).to_be_visible()
    expect(page.locator(ALERT).filter(has_text="(got 2.5)")).to_have_count(2)
    top_p.fill("1")                                                    # fixed: every message about it goes
    expect(page.locator(".field-error")).to_have_count(0)
    expect(page.locator(ALERT).filter(has_text="Top-p")).to_have_count(0)
    expect(page.get_by_text(re.compile(r"^sample among the fewest most likely tokens"))).to_be_visible()  # the hint
    prompt.fill("")
    page.get_by_role("button", name="Step round").click()
    expect(page.locator(ALERT).filter(has_text="Prompt must be a non-empty string.")).to_be_visible()
    prompt.fill(FIB)
    expect(page.locator(".field-error")).to_have_count(0)
    expect(page.locator(ALERT).filter(has_text="Prompt")).to_have_count(0)
    page.screenshot(path=artifacts / "app-message-fixed.png")


def test_a_rule_slider_shows_its_message_until_it_holds_a_good_weight(page, artifacts):
    page.get_by_role("tab", name="Rule").click()
    box = page.get_by_label("number input for q('mat')")
    box.fill("150")
    box.press("Tab")
    said = "q('mat') must be a weight from 0 to 100 (got 150)."
    expect(page.locator(".field-error").get_by_text(said)).to_be_visible()   # at the slider
    expect(page.locator(ALERT).get_by_text("⚠ " + said)).to_be_visible()
    page.screenshot(path=artifacts / "app-rule-message.png")
    box.fill("30")
    box.press("Tab")
    expect(page.locator(".field-error")).to_have_count(0)
    expect(page.locator(ALERT).filter(has_text="q('mat')")).to_have_count(0)


def test_at_400_px_the_sidebar_closes_clear_and_small_things_read(browser, url, artifacts):
    pg = open_app(browser, url, PHONE)
    try:
        assert pg.locator('[role="tab"][aria-selected="true"]').first.evaluate(CONTRAST) >= 4.5
        footer = [e for e in pg.locator("footer a, footer button").all() if e.is_visible()]
        assert footer and all(e.evaluate(CONTRAST) >= 4.5 for e in footer)
        toggle = pg.get_by_role("button", name="Toggle Sidebar")
        toggle.click()
        pg.wait_for_timeout(600)
        box, content = toggle.bounding_box(), pg.locator(".sidebar-content").bounding_box()
        width = pg.evaluate("document.documentElement.clientWidth")
        assert box["x"] + box["width"] <= width and box["x"] >= content["x"] + content["width"] - 0.5  # beside
        pg.screenshot(path=artifacts / "app-sidebar-400px.png")
        toggle.click()
        pg.get_by_role("tab", name="Rule").click()
        chart = pg.locator(".js-plotly-plot").first
        expect(chart).to_be_visible()
        assert chart.bounding_box()["y"] < pg.get_by_label("number input for p('mat')").bounding_box()["y"]
        pg.screenshot(path=artifacts / "app-rule-top-400px.png")
        pg.get_by_role("tab", name="Run").click()
        pg.get_by_role("button", name="Toggle Sidebar").click()
        fill(pg, prompt=SKY, max_new_tokens=40)                      # prose: sentences longer than 400 px
        pg.get_by_role("button", name="Toggle Sidebar").click()
        pg.get_by_role("button", name="Run", exact=True).click()
        expect(pg.get_by_text(re.compile(r"^Finished \("))).to_be_visible()
        text = [t for t in pg.locator(".spec-tokens").all() if t.is_visible()][0]
        lines = text.evaluate(LINE_STARTS)
        soft = [line for line in lines if line["soft"]]
        assert soft, lines                                            # something wrapped at 400 px
        assert all(line["x"] >= 5 * line["ch"] - 1 for line in soft), soft  # a wrapped line goes on indented
        token = tokens(pg)[0]
        token.focus()                                                 # its story box is not indented
        assert token.evaluate("e => getComputedStyle(e, '::after').textIndent") == "0px"
        right_axes = pg.locator(".js-plotly-plot").filter(has=pg.locator(".g-y2title")).all()
        assert len(right_axes) == 2  # drafts kept per round, and the run replayed at each threshold
        for plot in right_axes:
            plot.scroll_into_view_if_needed()
            plot.hover()
            bar = plot.locator(".modebar").bounding_box()
            for label in plot.locator(".g-y2title text, .y2tick text").all():
                b = label.bounding_box()
                assert not boxes_meet({"x": b["x"], "y": b["y"], "w": b["width"], "h": b["height"]},
                                 {"x": bar["x"], "y": bar["y"], "w": bar["width"], "h": bar["height"]}), label.text_content()
        pg.screenshot(path=artifacts / "app-run-wrapped-400px.png", full_page=True)
    finally:
        pg.context.close()
