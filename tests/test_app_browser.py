"""Tier 2 of the app tests: the launched app with the embedded pair, driven in headless Chromium by
role and label. The app's loader gets the pair the ``real_pair`` fixture already loaded (load_pair
memoises per process), so the models load once per test session. Screenshots go to test-artifacts/."""
from __future__ import annotations

import re
import socket

import pytest
from playwright import sync_api

from specdec import ModelChoice
from specdec_ui import browser as chromium
from specdec_ui.layout import build_demo, launch
from specdec_ui.state import Loader

pytestmark = [pytest.mark.browser, pytest.mark.real]

FIB = "Write a Python function that returns the n-th Fibonacci number iteratively."
SKY = "In three sentences, explain why the sky is blue."
ROUND_S = 120_000  # ms: generous waits for a round or two, the CPU may be shared
sync_api.expect.set_options(timeout=ROUND_S)


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


@pytest.fixture()
def page(browser, url):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    pg = open_app(context, url)
    yield pg
    context.close()


def open_app(context, url):
    pg = context.new_page()
    pg.set_default_timeout(ROUND_S)
    pg.goto(url)
    sync_api.expect(pg.get_by_role("button", name="Step round")).to_be_enabled()
    return pg


def drafted_table(pg):
    return pg.get_by_role("grid", name="Drafted tokens")


def tokens(pg) -> list:
    """The colour-coded token elements of the visible token view."""
    return [t for t in pg.locator(".spec-tokens .tok").all() if t.is_visible()]


def fill(pg, prompt=FIB, k=4, temperature=0, max_new_tokens=12):
    pg.get_by_label("Prompt", exact=True).fill(prompt)
    pg.get_by_label("K (drafted tokens per round)").fill(str(k))
    pg.get_by_label("Draft confidence (0 = always K)").fill("0")  # every round drafts exactly K
    pg.get_by_label("Temperature (0 = greedy)").fill(str(temperature))
    pg.get_by_label("Max new tokens").fill(str(max_new_tokens))


def test_step_one_round_shows_proposals_verdicts_and_charts(page, artifacts):
    fill(page)
    page.get_by_role("button", name="Draft").click()
    sync_api.expect(page.get_by_text("Round 1: drafted, not yet verified.")).to_be_visible()
    table = drafted_table(page)
    sync_api.expect(table.get_by_text("q(x)")).to_be_visible()
    sync_api.expect(table.get_by_role("row")).to_have_count(5)  # header + K = 4 proposals
    page.get_by_role("button", name="Verify").click()
    sync_api.expect(page.get_by_text("Round 1: verified, not yet committed.")).to_be_visible()
    sync_api.expect(table.get_by_text(re.compile(r"^(accepted|rejected) \(u")).first).to_be_visible()
    sync_api.expect(page.get_by_text("Acceptance test per drafted token")).to_be_visible()
    sync_api.expect(page.get_by_text(re.compile(r"^(Bonus token|Position \d)"))).to_be_visible()
    sync_api.expect(page.get_by_text(re.compile("^Verifier KV cache: "))).to_be_visible()
    page.screenshot(path=artifacts / "app-step.png", full_page=True)
    page.get_by_role("button", name="Next round").click()
    sync_api.expect(page.get_by_text("Round 1 committed. Round 2: drafted, not yet verified.")).to_be_visible()


def test_short_generation_is_colour_coded_with_timing_and_replays(page, artifacts, tmp_path):
    page.get_by_role("tab", name="Run the whole generation").click()
    fill(page, max_new_tokens=16)
    page.get_by_role("button", name="Run", exact=True).click()
    sync_api.expect(page.get_by_text(re.compile(r"^Finished \("))).to_be_visible()
    shown = tokens(page)
    assert len(shown) >= 8
    colours = {t.evaluate("e => getComputedStyle(e).backgroundColor") for t in shown}
    assert len(colours) >= 2, "accepted drafts and at least one resampled or bonus token"
    sync_api.expect(page.get_by_text("Time per round by phase")).to_be_visible()
    sync_api.expect(page.get_by_text("Mean tokens per round vs theory")).to_be_visible()
    assert "round 1, position 1" in shown[0].get_attribute("title")  # the numbers, on hover and focus
    shown[0].focus()
    assert page.evaluate("document.activeElement.classList.contains('tok')")
    page.screenshot(path=artifacts / "app-run.png", full_page=True)
    with page.expect_download() as download:
        page.get_by_role("button", name="Download trace (JSON)").click()
    trace = tmp_path / "trace.json"
    download.value.save_as(trace)
    with page.expect_file_chooser() as chooser:
        page.get_by_role("button", name="Click to upload or drop files").click()
    chooser.value.set_files(str(trace))
    sync_api.expect(page.get_by_text(re.compile(r"^Replayed a trace of \d+ rounds"))).to_be_visible()


def test_side_by_side_at_temperature_zero_is_identical(page, artifacts):
    page.get_by_role("tab", name="Verifier only vs speculative").click()
    fill(page, max_new_tokens=12)
    page.get_by_role("button", name="Run both").click()
    sync_api.expect(page.get_by_text("Identical output")).to_be_visible(timeout=4 * ROUND_S)
    sync_api.expect(page.get_by_text(re.compile(r"^Speedup \d"))).to_be_visible()
    sync_api.expect(page.get_by_text("Tokens generated vs elapsed time")).to_be_visible()
    assert page.get_by_label("Verifier only").input_value() == page.get_by_label("Speculative").input_value() != ""
    page.screenshot(path=artifacts / "app-compare.png", full_page=True)


def test_invalid_value_shows_its_message_and_the_app_keeps_working(page, artifacts):
    fill(page, k=2)
    page.get_by_role("button", name="Step round").click()
    sync_api.expect(page.get_by_text("Round 1: drafted, verified and committed.")).to_be_visible()
    page.get_by_label("K (drafted tokens per round)").fill("0")
    page.get_by_role("button", name="Step round").click()
    sync_api.expect(page.get_by_text("k must be an integer in [1, 32] (got 0)").first).to_be_visible()
    sync_api.expect(page.get_by_text("Round 1: drafted, verified and committed.")).to_be_visible()  # still shown
    page.screenshot(path=artifacts / "app-invalid.png", full_page=True)
    page.get_by_label("K (drafted tokens per round)").fill("2")
    page.get_by_role("button", name="Step round").click()
    sync_api.expect(page.get_by_text(re.compile(r"Round 2: drafted, verified and committed\."))).to_be_visible()
    sync_api.expect(page.get_by_text(re.compile(r"^Error:"))).to_have_count(0)


def test_two_sessions_stepping_at_once_keep_separate_state(browser, url, artifacts):
    a_ctx, b_ctx = (browser.new_context(viewport={"width": 1400, "height": 1000}) for _ in range(2))
    try:
        a, b = open_app(a_ctx, url), open_app(b_ctx, url)
        fill(a, prompt=FIB, k=3)
        fill(b, prompt=SKY, k=2)
        a.get_by_role("button", name="Step round").click()
        b.get_by_role("button", name="Step round").click()  # both rounds in flight together
        for pg in (a, b):
            sync_api.expect(pg.get_by_text("Round 1: drafted, verified and committed.")).to_be_visible()
        a.get_by_role("button", name="Step round").click()
        b.get_by_role("button", name="Draft").click()
        sync_api.expect(a.get_by_text(re.compile(r"Round 2: drafted, verified and committed\."))).to_be_visible()
        sync_api.expect(b.get_by_text(re.compile(r"Round 2: drafted, not yet verified\."))).to_be_visible()
        sync_api.expect(drafted_table(a).get_by_role("row")).to_have_count(4)  # K = 3
        sync_api.expect(drafted_table(b).get_by_role("row")).to_have_count(3)  # K = 2
        a_text = [t.inner_text() for t in tokens(a)]
        b_text = [t.inner_text() for t in tokens(b)]
        assert a_text and b_text and a_text != b_text
        a.screenshot(path=artifacts / "app-session-a.png", full_page=True)
        b.screenshot(path=artifacts / "app-session-b.png", full_page=True)
    finally:
        a_ctx.close()
        b_ctx.close()
