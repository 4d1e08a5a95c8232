"""Tier 2 of the app tests: the launched app with the embedded pair, driven in headless Chromium by
role and label, at a 1280x800 laptop size and at 400 px wide. The app's loader gets the pair the
``real_pair`` fixture already loaded (load_pair memoises per process), so the models load once per
test session. Screenshots go to test-artifacts/."""
from __future__ import annotations

import re
import socket

import pytest
from playwright import sync_api

from specdec import ModelChoice
from specdec_ui import browser as chromium
from specdec_ui.layout import build_demo, launch
from specdec_ui.state import APP_PROMPT_TOKENS, Loader

pytestmark = [pytest.mark.browser, pytest.mark.real]

FIB = "Write a Python function that returns the n-th Fibonacci number iteratively."
SKY = "In three sentences, explain why the sky is blue."
ROUND_S = 120_000  # ms: generous waits for a round or two, the CPU may be shared
LAPTOP, PHONE = {"width": 1280, "height": 800}, {"width": 400, "height": 800}
sync_api.expect.set_options(timeout=ROUND_S)
expect = sync_api.expect

CONTRAST = """e => {
  const lum = c => { const [r, g, b] = c.match(/\\d+(\\.\\d+)?/g).slice(0, 3).map(Number).map(v => {
    v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b; };
  const s = getComputedStyle(e); const a = lum(s.color), b = lum(s.backgroundColor);
  return (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05); }"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def url(real_pair):
    loader = Loader(ModelChoice.of(real_pair)).load_in_background().wait()
    assert loader.pair is real_pair  # the memoised pair: no second load
    port = _free_port()
    demo = build_demo(loader)
    launch(demo, port=port, prevent_thread_lock=True, quiet=True)
    yield f"http://127.0.0.1:{port}"
    demo.close()


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:
        b = chromium.launch(p)
        yield b
        b.close()


def open_app(browser, url, viewport=LAPTOP):
    context = browser.new_context(viewport=viewport)
    pg = context.new_page()
    pg.set_default_timeout(ROUND_S)
    pg.goto(url)
    expect(pg.get_by_role("button", name="Step round")).to_be_enabled()
    pg.wait_for_timeout(500)  # the narrow-screen sidebar closes itself 300 ms after load
    return pg


@pytest.fixture()
def page(browser, url):
    pg = open_app(browser, url)
    yield pg
    pg.context.close()


def tokens(pg) -> list:
    """The colour-coded token elements of the visible token view."""
    return [t for t in pg.locator(".spec-tokens .tok").all() if t.is_visible()]


def fill(pg, prompt=FIB, k=4, temperature=0, max_new_tokens=12):
    pg.get_by_role("textbox", name=re.compile(r"^Prompt")).fill(prompt)
    pg.get_by_label("K (drafted tokens per round)").fill(str(k))
    pg.get_by_label("Draft confidence (0 = always K)").fill("0")  # every round drafts exactly K
    pg.get_by_label("Temperature (0 = greedy)").fill(str(temperature))
    pg.get_by_label("Max new tokens").fill(str(max_new_tokens))


def visible_plots(pg) -> int:
    return sum(p.is_visible() for p in pg.locator(".js-plotly-plot").all())


def test_a_fresh_page_is_truthful_and_shows_results_above_the_fold(page, artifacts):
    assert visible_plots(page) == 0                               # no empty plot boxes before there is data
    expect(page.get_by_text("Temperature 0: the rule has nothing to decide.")).to_have_count(0)
    page.get_by_role("tab", name="Run").click()
    expect(page.get_by_role("button", name="Download trace (JSON)")).to_be_disabled()
    page.get_by_role("button", name="Stop run").click()           # nothing runs: the page says so
    expect(page.get_by_text("Nothing is running.")).to_be_visible()
    page.get_by_role("tab", name="Step through").click()
    fill(page, k=3)
    page.get_by_role("button", name="Step round").click()
    expect(page.get_by_text("Round 1: drafted, verified and committed.")).to_be_visible()
    expect(page.get_by_text("Temperature 0: the rule has nothing to decide.")).to_be_visible()
    for what in (page.get_by_text("Round 1: drafted, verified and committed."), page.get_by_text("Draft.", exact=True)):
        assert what.bounding_box()["y"] + what.bounding_box()["height"] <= LAPTOP["height"]
    expect(page.get_by_text("Acceptance test per drafted token")).to_be_visible()  # the charts appear with data
    assert visible_plots(page) == 2
    page.screenshot(path=artifacts / "app-step-1280x800.png")
    page.get_by_role("button", name="Reset", exact=True).click()
    expect(page.get_by_text("Reset: press Draft or Step round to begin.")).to_be_visible()
    expect(page.get_by_text("No tokens yet.").first).to_be_visible()  # nothing stale is left


def test_stepping_through_a_round_at_temperature_above_zero_shows_the_rule(page, artifacts):
    fill(page, temperature=0.8, k=4)
    page.get_by_role("button", name="Draft", exact=True).click()
    expect(page.get_by_text(re.compile(r"Round 1: drafted, not yet verified\. The engine computed this whole round")
                            )).to_be_visible()
    table = page.get_by_role("grid", name="Drafted tokens")
    expect(table.get_by_role("row")).to_have_count(5)             # header + K = 4 proposals
    page.get_by_role("button", name="Verify", exact=True).click()
    expect(page.get_by_text("Round 1: verified, not yet committed.", exact=False)).to_be_visible()
    expect(table.get_by_text(re.compile(r"^(accepted|rejected) \(u")).first).to_be_visible()
    expect(page.get_by_text("Acceptance test per drafted token")).to_be_visible()
    expect(page.get_by_text(re.compile(r"^(All 4 drafts kept|Position \d: drafted)"))).to_be_visible()
    expect(page.get_by_text(re.compile("^Verifier KV cache: "))).to_be_visible()
    expect(page.get_by_text("Temperature 0: the rule has nothing to decide.")).to_have_count(0)
    page.screenshot(path=artifacts / "app-step-sampled.png", full_page=True)
    page.get_by_label("K (drafted tokens per round)").fill("3")   # a change mid-round is announced, not silent
    page.get_by_role("button", name="Step round").click()
    expect(page.get_by_text(re.compile(r"K \(drafted tokens per round\) changed: the step-through restarted from "
                                       r"the prompt \(1 round on show discarded\)"))).to_be_visible()


def test_the_run_keeps_the_text_shape_marks_every_kind_twice_and_replays(page, artifacts, tmp_path):
    page.get_by_role("tab", name="Run").click()
    fill(page, max_new_tokens=24)
    page.get_by_role("button", name="Run", exact=True).click()
    expect(page.get_by_text(re.compile(r"^Finished \("))).to_be_visible()
    shown = tokens(page)
    assert len(shown) >= 8
    styles = {t.get_attribute("class"): t.evaluate(
        "e => { const s = getComputedStyle(e); return [s.backgroundColor, s.borderBottomStyle, s.textDecorationLine] }")
        for t in shown}
    assert len({s[0] for s in styles.values()}) >= 2, "accepted drafts and at least one resampled or bonus token"
    cues = {"tok tok-accepted": "solid", "tok tok-resampled": "dashed", "tok tok-bonus": "double"}
    for cls, (_, border, decoration) in styles.items():  # a second cue besides colour for every kind
        assert border == cues[cls] if cls in cues else "line-through" in decoration, cls
    assert all(t.evaluate(CONTRAST) >= 4.5 for t in shown[:10])
    assert "round 1, position 1" in shown[0].get_attribute("title")   # the numbers, on hover and focus
    shown[0].focus()
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.classList.contains('tok')")  # every token is a tab stop
    expect(page.get_by_text(re.compile(r"tok/s = \d+ tokens / [\d.]+ s of this session's compute"))).to_be_visible()
    expect(page.get_by_text(re.compile(r"verifier passes = one per round \+ one over the prompt"))).to_be_visible()
    expect(page.get_by_text("Time per round by phase (this session's compute)")).to_be_visible()
    page.get_by_text("Plain text (whitespace shown as").filter(visible=True).first.click()
    plain = page.locator("#run-plain pre")
    expect(plain).to_be_visible()
    text = plain.inner_text()
    assert "·" not in text and "↵" not in text and "\n" in text       # markers are drawn, never copied
    assert page.locator("#run-plain .sp").count() > 0                  # but spaces are marked
    page.screenshot(path=artifacts / "app-run.png", full_page=True)
    with page.expect_download() as download:
        page.get_by_role("button", name="Download trace (JSON)").click()
    trace = tmp_path / "trace.json"
    download.value.save_as(trace)
    with page.expect_file_chooser() as chooser:
        page.get_by_role("button", name="Click to upload or drop files").click()
    chooser.value.set_files(str(trace))
    expect(page.get_by_text(re.compile(r"^Replayed a trace of \d+ rounds"))).to_be_visible()
    bad = tmp_path / "bad.json"
    bad.write_text('{"rounds": 3}')
    page.locator("button[aria-label='Clear']").first.click()
    with page.expect_file_chooser() as chooser:
        page.get_by_role("button", name="Click to upload or drop files").click()
    chooser.value.set_files(str(bad))
    message = page.get_by_text(re.compile(r"^Could not replay: bad\.json: not a specdec trace"))
    expect(message).to_be_visible()
    upload = page.get_by_text("Replay a downloaded trace (no models needed)")
    assert abs(message.bounding_box()["y"] - upload.bounding_box()["y"]) < 300     # at the upload box
    expect(page.get_by_text(re.compile(r"^Replayed a trace of \d+ rounds"))).to_be_visible()  # and truthful


def test_a_bad_value_shows_its_message_at_the_field_in_the_words_on_screen(page, artifacts):
    fill(page, k=2)
    page.get_by_role("button", name="Step round").click()
    expect(page.get_by_text("Round 1: drafted, verified and committed.")).to_be_visible()
    k = page.get_by_label("K (drafted tokens per round)")
    for value, message in (("2.5", "K (drafted tokens per round) must be a whole number (got 2.5)."),
                           ("", "K (drafted tokens per round) is empty: enter an integer in [1, 32]."),
                           ("0", "K (drafted tokens per round) must be an integer in [1, 32] (got 0).")):
        k.fill(value)
        page.get_by_role("button", name="Step round").click()
        shown = page.locator(".field-error").get_by_text(message)
        expect(shown).to_be_visible()
        assert 0 < k.bounding_box()["y"] - shown.bounding_box()["y"] < 120    # right above its input
        expect(page.get_by_text("Round 1: drafted, verified and committed.")).to_be_visible()  # nothing lost
    page.screenshot(path=artifacts / "app-invalid.png")
    k.fill("2")
    page.get_by_role("button", name="Step round").click()
    expect(page.get_by_text(re.compile(r"Round 2: drafted, verified and committed\."))).to_be_visible()
    expect(page.locator(".field-error")).to_have_count(0)


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


def test_side_by_side_at_temperature_zero_is_identical(page, artifacts):
    page.get_by_role("tab", name="Compare").click()
    fill(page, max_new_tokens=12)
    page.get_by_role("button", name="Run both").click()
    expect(page.get_by_text("Identical output")).to_be_visible(timeout=4 * ROUND_S)
    expect(page.get_by_text(re.compile(r"^Speedup \d"))).to_be_visible()
    expect(page.get_by_text("Tokens generated against this session's compute time")).to_be_visible()
    base, spec = page.locator("#verifier-only-text pre").inner_text(), page.locator("#speculative-text pre").inner_text()
    assert base == spec != ""
    page.screenshot(path=artifacts / "app-compare.png", full_page=True)


def test_at_400_px_every_tab_shows_and_plots_stack(browser, url, artifacts):
    pg = open_app(browser, url, PHONE)
    try:
        for name in ("Step through", "Run", "Compare"):
            box = pg.get_by_role("tab", name=name).bounding_box()
            assert box and box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"], name
        expect(pg.get_by_role("textbox", name=re.compile(r"^Prompt"))).not_to_be_in_viewport()  # the sidebar starts closed
        assert pg.get_by_role("button", name="Step round").evaluate(CONTRAST) >= 4.5
        pg.get_by_role("button", name="Toggle Sidebar").click()
        fill(pg, temperature=0.8, max_new_tokens=12)
        pg.get_by_role("button", name="Toggle Sidebar").click()
        pg.get_by_role("tab", name="Run").click()
        for name in ("Run", "Stop run"):  # white on the primary and stop buttons: WCAG AA
            assert pg.get_by_role("button", name=name, exact=True).evaluate(CONTRAST) >= 4.5, name
        pg.get_by_role("button", name="Run", exact=True).click()
        expect(pg.get_by_text(re.compile(r"^Finished \("))).to_be_visible()
        pg.wait_for_timeout(1000)
        boxes = [p.bounding_box() for p in pg.locator(".js-plotly-plot").all() if p.is_visible()]
        assert len(boxes) == 4 and len({round(b["x"]) for b in boxes}) == 1  # one plot per row
        assert all(b["x"] + b["width"] <= PHONE["width"] + 1 for b in boxes)
        pg.screenshot(path=artifacts / "app-run-400px.png", full_page=True)
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
            expect(pg.get_by_text("Round 1: drafted, verified and committed.")).to_be_visible()
        a.get_by_role("button", name="Step round").click()
        b.get_by_role("button", name="Draft", exact=True).click()
        expect(a.get_by_text(re.compile(r"Round 2: drafted, verified and committed\."))).to_be_visible()
        expect(b.get_by_text(re.compile(r"Round 2: drafted, not yet verified\."))).to_be_visible()
        expect(a.get_by_role("grid", name="Drafted tokens").get_by_role("row")).to_have_count(4)  # K = 3
        expect(b.get_by_role("grid", name="Drafted tokens").get_by_role("row")).to_have_count(3)  # K = 2
        a_text = [t.inner_text() for t in tokens(a)]
        b_text = [t.inner_text() for t in tokens(b)]
        assert a_text and b_text and a_text != b_text
        a.screenshot(path=artifacts / "app-session-a.png", full_page=True)
        b.screenshot(path=artifacts / "app-session-b.png", full_page=True)
    finally:
        a.context.close()
        b.context.close()
