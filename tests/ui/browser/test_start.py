"""Tier 2 for the page's front door: the Start-here path and the first round a newcomer steps, in headless
Chromium at 1280x800 and at 400 px wide, with the fixtures of ``test_app_browser``. Screenshots of the
first round go to test-artifacts/."""
from __future__ import annotations

import re

import pytest
from helpers.browser import LAPTOP, PHONE, expect

from specdec_ui.start import TITLE
from specdec_ui.tabs.step import ALL_K_LABEL

pytestmark = [pytest.mark.browser, pytest.mark.real]

STEPS = ("1 · The rule on six words", "2 · One real round", "3 · A whole run", "4 · Side by side", "5 · The lab")


def fresh(browser, url, viewport):  # noqa: F811
    pg = browser.new_context(viewport=viewport).new_page()
    pg.goto(url)
    expect(pg.get_by_text("Ready:")).to_be_visible(timeout=300_000)
    pg.wait_for_timeout(500)  # the narrow-screen sidebar closes itself 300 ms after load
    return pg


def selected(pg, name: str) -> None:
    expect(pg.get_by_role("tab", name=name, exact=True)).to_have_attribute("aria-selected", "true")


def drafted_rows(pg) -> int:
    return pg.get_by_role("table", name="Drafted tokens").locator("tbody tr").count()


@pytest.mark.parametrize("viewport", [LAPTOP, PHONE], ids=["1280", "400"])
def test_the_start_here_path_is_above_the_fold_and_each_step_opens_its_tab(browser, url, viewport, artifacts):  # noqa: F811
    pg = fresh(browser, url, viewport)
    try:
        heading = pg.get_by_text(TITLE)
        first = pg.get_by_role("button", name=STEPS[0])
        for seen in (heading, first):                              # on the first screen, no scrolling
            box = seen.bounding_box()
            assert box["y"] + box["height"] <= viewport["height"], (seen, box)
        if viewport is LAPTOP:                                     # the whole path fits a laptop's first screen
            box = pg.get_by_role("button", name=STEPS[-1]).bounding_box()
            assert box["y"] + box["height"] <= viewport["height"]
        selected(pg, "Rule")                                       # the page opens on the lesson's first tab
        pg.screenshot(path=artifacts / f"start-here-{viewport['width']}.png")

        first.click()
        selected(pg, "Rule")
        expect(pg.get_by_role("button", name="Sample M times")).to_be_visible()
        pg.get_by_role("button", name=STEPS[1]).click()
        selected(pg, "Step through")
        expect(pg.get_by_role("checkbox", name=ALL_K_LABEL)).to_be_checked()
        pg.get_by_role("button", name="Draft", exact=True).click()
        expect(pg.get_by_text(re.compile(r"^Round 1: drafted\."))).to_be_visible()
        assert drafted_rows(pg) >= 3                               # K = 6 drafted, never one lonely token
        pg.get_by_role("button", name="Verify", exact=True).click()
        expect(pg.get_by_text(re.compile(r"ms per position instead of"))).to_be_visible()
        details = pg.get_by_text("Cost details: the fit, and this forward in one-token forwards")
        if details.count():                                        # the fit is timed once after loading
            details.click()
            expect(pg.get_by_text(re.compile(r"^The fit: .*this forward / t\(1\) = "))).to_be_visible()
        pg.get_by_role("button", name="Accept/reject").click()
        expect(pg.get_by_text(re.compile(r"^Round 1: drafted, verified and decided"))).to_be_visible()
        pg.get_by_role("table", name="Drafted tokens").scroll_into_view_if_needed()
        pg.screenshot(path=artifacts / f"first-round-{viewport['width']}.png")

        for step, tab, button in ((2, "Run", "Run"), (3, "Compare", "Run both")):
            pg.get_by_role("button", name=STEPS[step]).click()
            selected(pg, tab)
            expect(pg.get_by_role("button", name=button, exact=True)).to_be_visible()
        pg.get_by_role("button", name=STEPS[4]).click()
        selected(pg, "Step through")
        expect(pg.get_by_label("Temperature (0 = greedy)")).to_have_value("0.8")
    finally:
        pg.context.close()


def test_the_first_round_at_the_defaults_drafts_several_tokens_and_the_path_stays_closed_once_closed(
        browser, url):  # noqa: F811
    pg = fresh(browser, url, LAPTOP)
    try:
        pg.get_by_role("tab", name="Step through").click()          # no Start-here click: the page's own defaults
        pg.get_by_role("button", name="Step round").click()
        expect(pg.get_by_text(re.compile(r"^Round 1: drafted, verified, decided and committed"))).to_be_visible()
        assert drafted_rows(pg) >= 3
        pg.get_by_text(TITLE).click()                              # closed by someone who knows the app...
        expect(pg.get_by_role("button", name=STEPS[0])).to_be_hidden()
        pg.wait_for_timeout(500)
        pg.reload()
        expect(pg.get_by_text("Ready:")).to_be_visible()
        pg.wait_for_timeout(1000)
        expect(pg.get_by_role("button", name=STEPS[0])).to_be_hidden()  # ...stays closed on their next visit
        pg.get_by_text(TITLE).click()
        expect(pg.get_by_role("button", name=STEPS[0])).to_be_visible()
    finally:
        pg.context.close()


def test_the_four_tabs_stay_tabs_at_400_px_and_after_a_resize(browser, url):  # noqa: F811
    pg = browser.new_context(viewport=LAPTOP).new_page()
    try:
        pg.goto(url)
        expect(pg.get_by_text("Ready:")).to_be_visible()
        for width in (PHONE["width"], 360, LAPTOP["width"], PHONE["width"]):  # gradio re-measures on each resize
            pg.set_viewport_size({"width": width, "height": 850})
            pg.wait_for_timeout(800)
            for name in ("Rule", "Step through", "Run", "Compare"):
                expect(pg.get_by_role("tab", name=name, exact=True)).to_be_visible()
            expect(pg.get_by_role("button", name="More tabs")).to_have_count(0)
    finally:
        pg.context.close()
