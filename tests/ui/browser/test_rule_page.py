"""Tier 2 for the Rule tab: the launched app in headless Chromium at 1280x800 and at 400 px wide, by role
and label, with the fixtures and checks of ``test_app_browser``. The β and acceptance of each preset are
computed by hand here (p = (40, 20, 15, 12, 8, 5) / 100 over the example's six tokens). Screenshots go to
test-artifacts/."""
from __future__ import annotations

import re

import pytest
from helpers.browser import (
    LAPTOP,
    PHONE,
    assert_chart_labels_fit,
    expect,
    fill,
    free_port,
    inside,
    open_app,
    status,
)

from specdec import ModelChoice
from specdec_ui.page import build_demo, launch
from specdec_ui.state import Loader

pytestmark = [pytest.mark.browser, pytest.mark.real]

# preset button -> β = Σ min(p, q) = the chance a drafted token is kept, by hand
HAND = {
    "q = p": 1.0,
    "q uniform": 1 / 6 + 1 / 6 + 0.15 + 0.12 + 0.08 + 0.05,          # 0.733
    "q too sharp": 0.40 + 0.60 / 2,                                   # q = (70, 10, 7.5, 6, 4, 2.5): 0.700
    "q misses p's top token": 0.20 + 0.15 + 0.12 + 0.08 + 0.05,       # q = (0, 20, 15, 12, 8, 5) / 60: 0.600
    "The example sentence": 0.25 + 0.20 + 0.10 + 0.12 + 0.05 + 0.05,  # q = (25, 30, 10, 15, 5, 15): 0.770
}
BUGS = ("argmax draft, scored with softmax q", "residual not normalised", "p and q swapped")
WIDE = "() => document.documentElement.scrollWidth"


@pytest.fixture(scope="module")
def idle_url():
    """An app whose models never load: the Rule tab needs none."""
    port = free_port()
    demo = build_demo(Loader(ModelChoice()))
    launch(demo, port=port, prevent_thread_lock=True, quiet=True)
    yield f"http://127.0.0.1:{port}"
    demo.close()


def rule_tab(pg):
    tab = pg.get_by_role("tab", name="Rule")
    tab.click()
    expect(pg.get_by_role("button", name="Sample M times")).to_be_visible()


def beta_and_acceptance(pg) -> tuple[float, float]:
    text = pg.locator(".rule-beta").inner_text()
    return (float(re.search(r"β = Σ min\(p, q\) = ([\d.]+)", text).group(1)),
            float(re.search(r"Σ q\(x\)·min\(1, p\(x\)/q\(x\)\) = ([\d.]+)", text).group(1)))


def sampled(pg) -> tuple[float, float, float]:
    """The rule's TV, the bug's TV and the bound, as the sample summary states them."""
    text = pg.get_by_text(re.compile(r"one-draft rounds each")).inner_text()
    rule = pg.locator("li").filter(has_text=re.compile(r"^The rule \(draft x from q")).inner_text()
    bug = pg.locator("li").filter(has_text=re.compile(r"^The bug, ")).inner_text()
    number = lambda pattern, s: float(re.search(pattern, s).group(1))  # noqa: E731
    return (number(r"TV from p = ([\d.]+)", rule), number(r"TV from p = ([\d.]+)", bug),
            number(r"1\.5 · Σ √\(p\(1 − p\)/M\) = ([\d.]+)", text))


def check_presets_and_bugs(pg, artifacts, viewport, name):
    rule_tab(pg)
    for preset, beta in HAND.items():
        pg.get_by_role("button", name=preset, exact=True).click()
        expect(pg.locator(".rule-beta")).to_contain_text(f"β = Σ min(p, q) = {beta:.3f}")
        assert beta_and_acceptance(pg) == (round(beta, 3), round(beta, 3)), preset
    expect(pg.get_by_text(re.compile(r"E\(α, K\) = \(1 − α\^\(K\+1\)\) / \(1 − α\) = 3\.17 tokens per round"))
           ).to_be_visible()                                          # α = 0.77, K = 4: 0.729322 / 0.23
    pg.screenshot(path=artifacts / f"app-rule-{name}.png", full_page=True)
    for bug in BUGS:
        pg.get_by_role("radio", name=bug, exact=True).check()
        pg.get_by_role("button", name="Sample M times").click()
        expect(pg.get_by_text(re.compile(rf"^The bug, {re.escape(bug)}"))).to_be_visible()
        rule, wrong, bound = sampled(pg)
        assert rule <= bound < wrong, (bug, rule, bound, wrong)
        legend = pg.locator(".js-plotly-plot .legendtext")
        expect(legend.filter(has_text=re.compile(r"^the rule: TV"))).to_have_count(1)
    assert_chart_labels_fit(pg, at_least=3)                           # the overlap, E over K, the histogram
    assert pg.evaluate(WIDE) <= viewport["width"]
    pg.screenshot(path=artifacts / f"app-rule-sample-{name}.png", full_page=True)
    pg.get_by_role("button", name="q = p", exact=True).click()       # another q: the sample on show is cleared
    expect(pg.get_by_text(re.compile(r"^Press Sample M times to run the rule"))).to_be_visible()
    expect(pg.locator(".js-plotly-plot .legendtext").filter(has_text=re.compile(r"^the rule: TV"))).to_have_count(0)


def test_the_rule_tab_works_before_the_models_load_and_answers_bad_input(browser, idle_url, artifacts):  # noqa: F811
    ctx = browser.new_context(viewport=LAPTOP)
    pg = ctx.new_page()
    try:
        pg.goto(idle_url)
        expect(pg.get_by_text(re.compile(r"Loading models"))).to_be_visible()
        rule_tab(pg)
        assert beta_and_acceptance(pg) == (0.77, 0.77)               # the example, drawn with the page
        box = pg.get_by_label("number input for q('mat')")
        box.fill("")
        expect(pg.locator(".spec-alert").get_by_text("q('mat') is empty: enter a weight from 0 to 100.")).to_be_visible()
        box.fill("0")
        box.press("Tab")
        expect(pg.locator(".rule-beta")).to_contain_text("β = Σ min(p, q) = ")  # fixed: the numbers follow
        expect(pg.locator(".spec-alert").get_by_text("is empty")).to_have_count(0)
        pg.get_by_role("button", name="This position of the current real round").click()
        expect(pg.get_by_text(re.compile(r"No real round yet: in the Step through tab, step a round"))).to_be_visible()
        pg.screenshot(path=artifacts / "app-rule-no-models.png", full_page=True)
    finally:
        ctx.close()


def test_presets_give_the_hand_computed_beta_and_only_the_rule_lands_within_the_bound_at_1280(browser, url, artifacts):  # noqa: F811
    pg = open_app(browser, url, LAPTOP)
    try:
        check_presets_and_bugs(pg, artifacts, LAPTOP, "1280x800")
    finally:
        pg.context.close()


def test_presets_give_the_hand_computed_beta_and_only_the_rule_lands_within_the_bound_at_400_px(browser, url, artifacts):  # noqa: F811
    pg = open_app(browser, url, PHONE)
    try:
        assert inside(pg.get_by_role("tab", name="Rule").bounding_box(), PHONE)
        check_presets_and_bugs(pg, artifacts, PHONE, "400px")
        assert pg.locator(".prose.rule-rounds").bounding_box()["width"] >= 300  # text beside a chart: never a thin column
        for slider in pg.get_by_role("slider").all():                # each slider whole on the screen
            if slider.is_visible():
                assert inside(slider.bounding_box(), PHONE)
    finally:
        pg.context.close()


def test_the_keyboard_moves_k_and_reaches_and_presses_the_sample_button(browser, url):  # noqa: F811
    pg = open_app(browser, url, LAPTOP)
    try:
        rule_tab(pg)
        k = pg.get_by_label("range slider for K (drafts per round), with α = β held constant")
        k.focus()
        k.press("ArrowRight")                                         # K = 5
        expect(pg.get_by_text(re.compile(r"tokens per round at K = 5"))).to_be_visible()
        pg.get_by_role("radio", name=BUGS[1], exact=True).focus()
        pg.keyboard.press("Space")
        for _ in range(6):                                            # the button is the next stop or close by
            pg.keyboard.press("Tab")
            if pg.evaluate("document.activeElement.innerText") == "Sample M times":
                break
        assert pg.evaluate("document.activeElement.innerText") == "Sample M times"
        assert pg.evaluate("getComputedStyle(document.activeElement).outlineStyle") == "solid"  # a visible ring
        pg.keyboard.press("Enter")
        expect(pg.get_by_text(re.compile(r"^The bug, residual not normalised"))).to_be_visible()
    finally:
        pg.context.close()


def test_the_current_real_round_preset_loads_the_round_stepped_in_step_through(browser, url, artifacts):  # noqa: F811
    pg = open_app(browser, url, LAPTOP)
    try:
        fill(pg, temperature=0.8, k=4)
        pg.get_by_role("button", name="Step round").click()
        expect(status(pg, "Round 1: drafted, verified, decided and committed.")).to_be_visible()
        rule_tab(pg)
        picker = pg.get_by_label("Position of the round on show in Step through")
        expect(picker).to_have_value(re.compile(r"^\d+: "))          # its tested positions, the sampler's one chosen
        position = int(re.match(r"(\d+):", picker.input_value()).group(1))
        pg.get_by_role("button", name="This position of the current real round").click()
        note = pg.get_by_text(re.compile(rf"Loaded round 1, position {position} of Step through"))
        expect(note).to_be_visible()
        trace_beta = float(re.search(r"whole vocabulary: ([\d.]+)", note.inner_text()).group(1))
        expect(pg.get_by_label("range slider for p(all other tokens)")).to_be_attached()  # the rest, lumped
        beta, accepted = beta_and_acceptance(pg)
        assert beta == accepted and beta >= trace_beta - 0.01        # lumping can only raise the overlap
        assert_chart_labels_fit(pg, at_least=2)
        pg.screenshot(path=artifacts / "app-rule-real-round.png", full_page=True)
    finally:
        pg.context.close()
