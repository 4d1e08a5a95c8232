"""The step-through's "Download this round" in headless Chromium, at 1280 and at 400 px: a chain round and a
tree round download as SVG and PNG, the SVG holds the drafted tokens and verdicts the page shows, and both
open as 1920x1080 images. Each figure is also drawn by Chromium at 1920x1080 into test-artifacts/, the size
it is projected at, for a person to look at."""
from __future__ import annotations

import ast
import base64
import re
import struct
import xml.etree.ElementTree as ET

import pytest
from helpers.browser import LAPTOP, PHONE, expect, fill, open_app, status

from specdec.teach.figure import visible

pytestmark = [pytest.mark.browser, pytest.mark.real]

SVG = "{http://www.w3.org/2000/svg}"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# An image's natural size once the browser has decoded it from a data URL: 0 x 0 when it cannot.
OPENS = """async (src) => { const img = new Image(); img.src = src;
  try { await img.decode(); } catch (e) { return [0, 0]; } return [img.naturalWidth, img.naturalHeight]; }"""


def texts(el) -> list[str]:
    return [t.text or "" for t in el.iter(f"{SVG}text")]


def groups(root, cls: str) -> list:
    return [g for g in root.iter(f"{SVG}g") if g.get("class") == cls]


def settings(pg, viewport, **kw) -> None:
    """Fill the sidebar's form; on a narrow screen the sidebar is opened for it and closed again."""
    narrow = viewport is PHONE
    if narrow:
        pg.get_by_role("button", name="Toggle Sidebar").click()
    fill(pg, **kw)
    if narrow:
        pg.get_by_role("button", name="Toggle Sidebar").click()


def download(pg, name: str, path, keyboard: bool = False) -> bytes:
    """Press a download button (with the keyboard: focus, then Enter) and keep the file at ``path``."""
    button = pg.get_by_role("button", name=name)
    expect(button).to_be_enabled()
    with pg.expect_download() as d:
        if keyboard:
            button.focus()
            pg.keyboard.press("Enter")
        else:
            button.click()
    d.value.save_as(path)
    return path.read_bytes()


def check_opens(pg, svg: bytes, png: bytes) -> None:
    """Both files decode as 1920x1080 images; the PNG's own header says so too."""
    assert png.startswith(PNG_MAGIC) and struct.unpack(">II", png[16:24]) == (1920, 1080)
    for kind, data in (("svg+xml", svg), ("png", png)):
        assert pg.evaluate(OPENS, f"data:image/{kind};base64,{base64.b64encode(data).decode()}") == [1920, 1080], kind


def look(browser, svg: bytes, path) -> None:
    """The SVG as a projector shows it: drawn by Chromium at 1920x1080, saved as a screenshot."""
    context = browser.new_context(viewport={"width": 1920, "height": 1080})
    try:
        pg = context.new_page()
        pg.set_content(f'<body style="margin:0">{svg.decode()}</body>')
        pg.screenshot(path=path)
    finally:
        context.close()


@pytest.mark.parametrize("viewport", [LAPTOP, PHONE], ids=["1280", "400"])
def test_a_chain_round_downloads_as_a_figure_with_the_tokens_and_verdicts_on_the_page(browser, url, artifacts,
                                                                                      viewport):
    pg = open_app(browser, url, viewport)
    size = viewport["width"]
    try:
        expect(pg.get_by_text("Nothing to download yet: step a round first")).to_be_visible()
        expect(pg.get_by_role("button", name="Download SVG")).to_be_disabled()
        expect(pg.get_by_role("button", name="Download PNG")).to_be_disabled()
        settings(pg, viewport, temperature=0.8, k=4)
        table = pg.get_by_role("table", name="Drafted tokens")
        for action, phase in (("Draft", "drafted. Next: Verify."), ("Verify", "drafted and verified."),
                              ("Accept/reject", "drafted, verified and decided.")):
            pg.get_by_role("button", name=action, exact=True).click()
            expect(status(pg, f"Round 1: {phase}")).to_be_visible()
        expect(pg.get_by_text(re.compile(r"Download this round \(round 1, after Accept/reject\)"))).to_be_visible()
        svg = download(pg, "Download SVG", artifacts / f"figure-chain-{size}.svg", keyboard=True)
        root = ET.fromstring(svg)
        rows = [[c.inner_text() for c in row.locator("th, td").all()] for row in table.locator("tbody tr").all()]
        drawn = [texts(g) for g in groups(root, "draft-row")]
        assert len(drawn) == len(rows) == 4
        for page_row, figure_row in zip(rows, drawn):             # the page's token and verdict, on the slide
            assert figure_row[1] == visible(ast.literal_eval(page_row[1]), 16)
            assert figure_row[-1].endswith(page_row[-1]) and figure_row[-1][0] in "✓✗–"
        assert texts(root)[0] == "Speculative decoding, round 1: after Accept/reject"
        png = download(pg, "Download PNG", artifacts / f"figure-chain-{size}.png")
        check_opens(pg, svg, png)
        assert pg.evaluate("() => document.documentElement.scrollWidth") <= size   # nothing runs off the edge
        for name in ("Download SVG", "Download PNG"):
            box = pg.get_by_role("button", name=name).bounding_box()
            assert box["x"] >= 0 and box["x"] + box["width"] <= size and box["height"] < 60, (name, box)
        pg.screenshot(path=artifacts / f"app-figure-controls-{size}.png", full_page=True)
        look(browser, svg, artifacts / f"figure-chain-{size}-projected.png")
    finally:
        pg.context.close()


@pytest.mark.parametrize("viewport", [LAPTOP, PHONE], ids=["1280", "400"])
def test_a_tree_round_downloads_as_a_figure_of_its_tree(browser, url, artifacts, viewport):
    pg = open_app(browser, url, viewport)
    size = viewport["width"]
    try:
        narrow = viewport is PHONE
        if narrow:
            pg.get_by_role("button", name="Toggle Sidebar").click()
        pg.get_by_role("radio", name="model, as a token tree").check()
        fill(pg, temperature=0.8, k=3)
        pg.get_by_label("Tree width W (0 = this machine's choice)").fill("2")
        pg.get_by_label("Tree nodes N (0 = this machine's choice)").fill("8")
        if narrow:
            pg.get_by_role("button", name="Toggle Sidebar").click()
        pg.get_by_role("button", name="Step round").click()
        expect(status(pg, "Round 1: drafted, verified, decided and committed.")).to_be_visible()
        page_nodes = pg.locator(".spec-tree .tree-node").all()
        kinds = [re.search(r"node-(\w+)", n.get_attribute("class")).group(1) for n in page_nodes]
        svg = download(pg, "Download SVG", artifacts / f"figure-tree-{size}.svg")
        root = ET.fromstring(svg)
        nodes, end = groups(root, "tree-node"), groups(root, "round-end")
        # the page draws the root, every node and the token that ends the round; so does the figure
        assert [g.get("data-status") for g in nodes + end[:1]] == kinds
        for j, (g, n) in enumerate(zip(nodes, page_nodes)):
            assert texts(g)[0].startswith(f"{j} ") and n.locator("text").first.text_content().startswith(f"{j} ")
        assert texts(root)[0] == "Speculative decoding, round 1 (tree): after Commit and roll back"
        assert "W = 2, N = 8" in " ".join(texts(root))
        png = download(pg, "Download PNG", artifacts / f"figure-tree-{size}.png")
        check_opens(pg, svg, png)
        look(browser, svg, artifacts / f"figure-tree-{size}-projected.png")
    finally:
        pg.context.close()
