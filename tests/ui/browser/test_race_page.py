"""The Race tab in the launched app on the embedded pair, at 1280 and 400 px (issue 40): every drafter
races to the verifier-only output (a badge per row), the chart's labels fit, the outputs are coloured by
proposer, and the what-if for other hardware follows with this machine's prediction against the race;
at 400 px nothing runs off the page (the table scrolls in its own box). Screenshots go to test-artifacts/."""
from __future__ import annotations

import re

import pytest
from helpers.browser import LAPTOP, PHONE, assert_chart_labels_fit, expect, fill, open_app

from specdec.teach.race import RACERS
from specdec.teach.whatif import MACHINES

pytestmark = [pytest.mark.browser, pytest.mark.real]

EDIT = "Rename the variable `x` to `total` and return the code:\n\ndef add(items):\n    x = 0\n    for i in items:\n        x += i\n    return x\n"


def race(pg, phone: bool):
    if phone:
        pg.get_by_role("button", name="Toggle Sidebar").click()
    fill(pg, prompt=EDIT, k=4, temperature=0, max_new_tokens=16)
    if phone:
        pg.get_by_role("button", name="Toggle Sidebar").click()
    pg.get_by_role("tab", name="Race").click()
    pg.get_by_role("button", name="Race every drafter").click()
    expect(pg.get_by_text(re.compile(r"^Done: \d+ runs\.")).first).to_be_visible()


def check_race(pg, viewport, artifacts, name):
    table = pg.get_by_role("region", name="the race table (scrolls sideways)")
    expect(table.locator("tbody tr")).to_have_count(len(RACERS))
    assert table.locator(".cmp-identical").count() == len(RACERS) - 1   # every drafter: the same output
    assert table.locator(".cmp-differ").count() == 0
    expect(pg.get_by_text(re.compile(r"Fastest: "))).to_be_visible()
    outputs = pg.locator(".race-out-title")
    expect(outputs).to_have_count(len(RACERS))
    assert pg.locator(".race-by-verifier").count() > 0 and pg.locator(".race-by-model").count() > 0
    whatif = pg.get_by_text("What if this race's draft model ran on other hardware?")
    expect(whatif).to_be_visible()
    page_text = pg.locator("body").inner_text()
    for m in MACHINES:
        assert m.name in page_text
    # this machine predicted for the draft model and the copying drafters, each with its verdict
    verdicts = re.findall(r"measured ([\d.]+)x: (within|NOT within) 15%", page_text)
    what = pg.get_by_role("region", name="the what-if table (scrolls sideways)")
    expect(what.locator("tbody tr")).to_have_count(len(MACHINES) + 1)
    assert len(verdicts) == 3, verdicts
    assert_chart_labels_fit(pg, at_least=2)                     # the race's chart and the what-if's
    assert pg.evaluate("() => document.documentElement.scrollWidth") <= viewport["width"]
    for plot in pg.locator(".js-plotly-plot").all():
        if plot.is_visible():
            box = plot.bounding_box()
            assert box["x"] >= 0 and box["x"] + box["width"] <= viewport["width"] + 1
    pg.screenshot(path=artifacts / f"app-race-{name}.png", full_page=True)
    whatif.scroll_into_view_if_needed()
    pg.screenshot(path=artifacts / f"app-race-whatif-{name}.png")


def test_the_race_at_1280(browser, url, artifacts):
    pg = open_app(browser, url, LAPTOP)
    try:
        race(pg, phone=False)
        check_race(pg, LAPTOP, artifacts, "1280")
    finally:
        pg.context.close()


def test_the_race_at_400_px(browser, url, artifacts):
    pg = open_app(browser, url, PHONE)
    try:
        race(pg, phone=True)
        check_race(pg, PHONE, artifacts, "400px")
        table = pg.get_by_role("region", name="the race table (scrolls sideways)")
        assert table.evaluate("e => e.scrollWidth > e.clientWidth")  # wider than the phone: it scrolls in its box
    finally:
        pg.context.close()
