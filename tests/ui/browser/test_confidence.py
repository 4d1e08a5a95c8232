"""The Run tab's confidence section in the launched app on the embedded pair (issue 40): after a run at
draft confidence 0, each tested draft's confidence against its verdict, and the threshold slider that
replays the run; moved with the keyboard, the numbers follow. Screenshots go to test-artifacts/."""
from __future__ import annotations

import re

import pytest
from helpers.browser import PHONE, assert_chart_labels_fit, expect, fill, open_app

pytestmark = [pytest.mark.browser, pytest.mark.real]

MERGE = "Write a Python function that merges two sorted lists."


@pytest.mark.parametrize("viewport", [None, PHONE], ids=["1280", "400px"])
def test_the_threshold_replays_the_run(browser, url, artifacts, viewport):
    pg = open_app(browser, url, *([viewport] if viewport else []))
    try:
        if viewport:
            pg.get_by_role("button", name="Toggle Sidebar").click()
        fill(pg, prompt=MERGE, k=6, temperature=0, max_new_tokens=48)  # draft confidence 0: every round drafts K
        if viewport:
            pg.get_by_role("button", name="Toggle Sidebar").click()
        pg.get_by_role("tab", name="Run").click()
        pg.get_by_role("button", name="Run", exact=True).click()
        expect(pg.get_by_text(re.compile(r"^Finished \("))).to_be_visible()
        expect(pg.get_by_text("The draft's confidence against acceptance")).to_be_visible()
        own = pg.get_by_text(re.compile(r"At τ = 0\.00 \(the run's own threshold"))
        expect(own).to_be_visible()
        slider = pg.get_by_role("slider", name=re.compile("Confidence threshold"))
        slider.focus()
        for _ in range(50):
            pg.keyboard.press("ArrowRight")
        expect(pg.get_by_text(re.compile(r"At τ = 0\.50 \(the run drafted at 0\.00\)"))).to_be_visible()
        text = pg.locator("li").filter(has_text=re.compile(r"drafted per round \(the run: ")).filter(visible=True).first.inner_text()
        drafted, run_drafted = map(float, re.search(r"([\d.]+) drafted per round \(the run: ([\d.]+)\)", text).groups())
        assert drafted <= run_drafted <= 6
        assert_chart_labels_fit(pg, at_least=2)
        chart = pg.locator(".js-plotly-plot").filter(has_text="This run replayed at each threshold").first
        chart.scroll_into_view_if_needed()
        pg.screenshot(path=artifacts / f"app-run-confidence-{'400px' if viewport else '1280'}.png")
    finally:
        pg.context.close()
