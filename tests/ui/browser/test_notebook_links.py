"""Tier 2 for the notebook links: the launched app (its models never load: the links need none) in
headless Chromium at 1280x800 and at 400 px wide, by role and label. A notebook's title is a link that
opens, in a new tab, its page served by the app: the notebook's own heading and, for a run notebook,
its figures, drawn by the plotly.js served beside the page (no network). Screenshots go to
test-artifacts/."""
from __future__ import annotations

import nbformat
import pytest
from helpers.browser import LAPTOP, PHONE, expect, free_port, inside
from helpers.notebooks import render_script

from specdec import ModelChoice
from specdec_ui import notebooks
from specdec_ui.page import NOTEBOOK_LINES, build_demo, launch
from specdec_ui.state import Loader

pytestmark = [pytest.mark.browser, pytest.mark.real]

# The notebook run here, on a fresh kernel (the others' pages are as written): 01 loads the pair only for its
# opening timings, the least model work of any notebook.
RUN = "01_the_rule"
WIDE = "() => document.documentElement.scrollWidth"


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    """The app's address, and how many figures the run notebook drew."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(notebooks, "PAGES", tmp_path_factory.mktemp("html"))
        patch.setenv("SPECDEC_NOTEBOOK_BUDGET", "short")
        render = render_script()
        for name in NOTEBOOK_LINES:
            nb = nbformat.read(notebooks.NOTEBOOKS / f"{name}.ipynb", as_version=4)
            if name == RUN:
                render.execute(nb)
                figures = sum(render.PLOTLY_MIME in o.get("data", {}) for c in nb.cells for o in c.get("outputs", []))
            render.write_page(nb, name, "short" if name == RUN else None)
        port = free_port()
        demo = build_demo(Loader(ModelChoice()))
        launch(demo, port=port, prevent_thread_lock=True, quiet=True)
        yield f"http://127.0.0.1:{port}", figures
        demo.close()


def open_notebook(pg, name: str, viewport: dict, artifacts, shot: str):
    """Click ``name``'s link in the app; the new tab, once its page has loaded."""
    title = notebooks.title(name)
    link = pg.get_by_role("link", name=title)
    expect(link).to_be_visible()
    assert link.get_attribute("target") == "_blank"
    link.scroll_into_view_if_needed()
    assert inside(link.bounding_box(), viewport)                   # the whole title on screen, none cut off
    with pg.context.expect_page() as opened:
        link.click()
    page = opened.value
    page.wait_for_load_state()
    assert page.title() == title
    expect(page.get_by_role("heading", name=title, level=1)).to_be_visible()
    assert page.evaluate(WIDE) <= viewport["width"]               # the page's text wraps to the screen
    page.screenshot(path=artifacts / shot)
    return page


@pytest.mark.parametrize("viewport", [LAPTOP, PHONE], ids=["1280x800", "400px"])
def test_each_notebook_title_opens_its_page_in_a_new_tab(browser, app, viewport, artifacts):  # noqa: F811
    url, drawn = app
    size = f"{viewport['width']}"
    ctx = browser.new_context(viewport=viewport)
    pg = ctx.new_page()
    try:
        pg.goto(url)
        pg.get_by_text("Notebooks: the same lessons, measured").click()
        for name in NOTEBOOK_LINES:
            expect(pg.get_by_role("link", name=notebooks.title(name))).to_be_visible()
        expect(pg.get_by_text("(not run yet: no figures)")).to_have_count(len(NOTEBOOK_LINES) - 1)
        assert pg.evaluate(WIDE) <= viewport["width"]
        pg.screenshot(path=artifacts / f"app-notebooks-{size}.png")
        run = open_notebook(pg, RUN, viewport, artifacts, f"notebook-run-{size}.png")
        expect(run.get_by_text("run top to bottom on this machine")).to_be_visible()
        figures = run.locator(".js-plotly-plot")
        expect(figures.first).to_be_attached()                    # plotly.js came from the app, beside the page
        assert drawn >= 1 and figures.count() == drawn
        figures.first.scroll_into_view_if_needed()
        assert inside(figures.first.bounding_box(), viewport)
        run.screenshot(path=artifacts / f"notebook-run-figure-{size}.png")
        written = open_notebook(pg, "02_one_real_round", viewport, artifacts, f"notebook-as-written-{size}.png")
        expect(written.get_by_text("Not run yet: no figures.")).to_be_visible()
        assert written.locator(".js-plotly-plot").count() == 0
    finally:
        ctx.close()
