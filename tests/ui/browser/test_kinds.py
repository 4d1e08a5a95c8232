"""Acceptance by kind of token in the launched app (issue 30, part 3), at 1280 and 400 px: after a
Run on a code prompt the per-kind chart's counts, read from the page, add up to the drafts tested
the run's summary gives; the sentence under it says what it shows; a token's hover names its
class; Compare draws the same chart over its speculative runs. Fixtures and helpers are those of
``test_app_browser.py``; screenshots go to test-artifacts/."""
from __future__ import annotations

import re

import pytest
from helpers.browser import (
    PHONE,
    assert_chart_labels_fit,
    expect,
    fill,
    open_app,
)

from specdec.teach.tokenkind import KIND_NAMES

pytestmark = [pytest.mark.browser, pytest.mark.real]

MERGE = "Write a Python function that merges two sorted lists."
TITLE = "Drafts kept by kind of token"
SENTENCE = re.compile(r"(were kept most often|Only .* had|Too few drafts were tested)")


def kinds_chart(pg):
    return pg.locator(".js-plotly-plot").filter(has_text=TITLE).filter(visible=True).first


def shown_counts(pg) -> list[tuple[int, int]]:
    """(kept, tested) per row of the per-kind chart, read from its row labels."""
    rows = kinds_chart(pg).locator(".ytick text").all_text_contents()
    assert len(rows) == len(KIND_NAMES), rows
    return [tuple(map(int, m.groups())) for m in (re.search(r"(\d+)/(\d+)", r) for r in rows) if m]


def run_code_prompt(pg, phone: bool = False):
    """A Run of the code prompt (on a phone the sidebar is opened to fill the form, then closed)."""
    if phone:
        pg.get_by_role("button", name="Toggle Sidebar").click()
    fill(pg, prompt=MERGE, k=4, temperature=0, max_new_tokens=48)
    if phone:
        pg.get_by_role("button", name="Toggle Sidebar").click()
    pg.get_by_role("tab", name="Run").click()
    pg.get_by_role("button", name="Run", exact=True).click()
    expect(pg.get_by_text(re.compile(r"^Finished \("))).to_be_visible()
    expect(kinds_chart(pg)).to_be_visible()


def assert_counts_add_up_to_the_summary(pg):
    summary = pg.get_by_text(re.compile(r"drafts kept / tested = \d+ / \d+")).filter(visible=True).first
    kept, tested = map(int, re.search(r"drafts kept / tested = (\d+) / (\d+)", summary.inner_text()).groups())
    counts = shown_counts(pg)
    assert sum(t for _, t in counts) == tested > 0
    assert sum(k for k, _ in counts) == kept


def test_after_a_run_the_kinds_chart_adds_up_to_the_drafts_tested_and_a_token_names_its_class(page, artifacts):
    run_code_prompt(page)
    assert_counts_add_up_to_the_summary(page)
    expect(page.get_by_text(SENTENCE).filter(visible=True).first).to_be_visible()
    expect(page.get_by_text(re.compile(r"^kept / tested: drafts kept over drafts the rule tested")).filter(visible=True)
           .first).to_be_visible()
    names = "|".join(map(re.escape, KIND_NAMES.values()))
    token = page.locator(".spec-tokens .tok-accepted").filter(visible=True).first
    assert re.search(rf"class: ({names})", token.get_attribute("aria-label"))
    token.focus()                                                 # and the box drawn on focus says it
    assert re.search(rf"class: ({names})", token.evaluate("e => getComputedStyle(e, '::after').content"))
    assert_chart_labels_fit(page, at_least=5)
    kinds_chart(page).scroll_into_view_if_needed()
    page.screenshot(path=artifacts / "app-run-kinds.png", full_page=True)
    kinds_chart(page).screenshot(path=artifacts / "app-run-kinds-chart.png")


def test_at_400_px_the_kinds_chart_is_readable_and_stays_on_screen(browser, url, artifacts):  # noqa: F811
    pg = open_app(browser, url, PHONE)
    try:
        run_code_prompt(pg, phone=True)
        pg.wait_for_timeout(1000)
        assert_counts_add_up_to_the_summary(pg)
        chart = kinds_chart(pg)
        chart.scroll_into_view_if_needed()
        box = chart.bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"] + 1
        assert_chart_labels_fit(pg, at_least=5)
        assert pg.evaluate("() => document.documentElement.scrollWidth") <= PHONE["width"]
        chart.screenshot(path=artifacts / "app-run-kinds-400px.png")
    finally:
        pg.context.close()


def test_compare_draws_the_kinds_chart_over_its_speculative_runs(page, artifacts):
    page.get_by_role("tab", name="Compare").click()
    fill(page, prompt=MERGE, k=4, temperature=0, max_new_tokens=48)
    page.get_by_role("button", name="Run both").click()
    expect(page.get_by_text(re.compile(r"^Speed-up [\d.]+x"))).to_be_visible()
    expect(kinds_chart(page)).to_be_visible()
    assert sum(t for _, t in shown_counts(page)) > 0
    expect(page.get_by_text(SENTENCE).filter(visible=True).first).to_be_visible()
    assert_chart_labels_fit(page, at_least=3)
    kinds_chart(page).scroll_into_view_if_needed()
    page.screenshot(path=artifacts / "app-compare-kinds.png", full_page=True)
