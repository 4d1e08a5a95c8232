"""The notebooks as pages (``make notebooks-html``, ``scripts/render_notebooks.py``): a notebook is
written as HTML with its figures and nothing fetched from the network, and the page's notebook list
links each one to a page the app serves, or says it has none and how to make it."""
from __future__ import annotations

import re
from html import escape, unescape
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import unquote

import nbformat
import plotly.graph_objects as go
import pytest
from helpers.notebooks import render_script

from specdec_ui import notebooks, page

ROOT = Path(__file__).resolve().parents[2]
TINY = "99_tiny"
TINY_TITLE = "99 · A tiny lesson <with markup>"
LINK = re.compile(r'<a href="([^"]+)" target="_blank" rel="noopener">([^<]+)</a>')


@pytest.fixture(scope="module")
def render():
    return render_script()


@pytest.fixture
def folders(tmp_path, monkeypatch):
    """notebooks/ and its pages in a temporary folder, holding one tiny notebook whose one code cell
    drew one plotly figure (its output recorded as a kernel records it)."""
    monkeypatch.setattr(notebooks, "NOTEBOOKS", tmp_path)
    monkeypatch.setattr(notebooks, "PAGES", tmp_path / "html")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(f"# {TINY_TITLE}\n\nWhat it shows."),
                                         nbformat.v4.new_code_cell("fig")])
    nbformat.write(nb, tmp_path / f"{TINY}.ipynb")
    figure = go.Figure(go.Bar(x=["a", "b"], y=[0.25, 0.75], name="tiny bars")).to_plotly_json()
    nb.cells[1].outputs = [nbformat.v4.new_output("display_data", data={"application/vnd.plotly.v1+json": figure})]
    return nb


def test_a_run_notebook_is_a_page_with_its_figures_that_needs_no_network(render, folders):
    page = render.write_page(folders, TINY, "short")
    assert page == notebooks.run_page(TINY) and page.parent == notebooks.PAGES
    html = page.read_text()
    assert unescape(re.search(r"<title>(.*?)</title>", html).group(1)) == TINY_TITLE
    assert "tiny bars" in html and "Plotly.newPlot" in html                   # the figure, drawn in the page
    scripts = re.findall(r'<script[^>]*\ssrc="([^"]+)"', html)
    assert len(scripts) == 1 and (page.parent / scripts[0]).stat().st_size > 1_000_000  # plotly.js, beside it
    assert not re.search(r'<(?:script|link|img)[^>]*\s(?:src|href)="(?:https?:)?//', html)  # nothing fetched
    assert "on the `short` budget" in html.replace("<code>", "`").replace("</code>", "`")
    assert "Not run yet" not in html


def test_a_notebook_as_written_is_marked_not_run(render, folders):
    page = render.write_page(nbformat.read(notebooks.NOTEBOOKS / f"{TINY}.ipynb", as_version=4), TINY, None)
    assert page == notebooks.text_page(TINY) and not notebooks.run_page(TINY).exists()
    html = page.read_text()
    assert "Not run yet: no figures." in html and "Plotly.newPlot" not in html


def test_the_notebook_links_point_at_pages_the_app_serves(tmp_path, monkeypatch):
    monkeypatch.setattr(notebooks, "PAGES", tmp_path)
    names = list(page.NOTEBOOK_LINES)
    run, as_written, none = names[0], names[1], names[2:]
    notebooks.run_page(run).write_text("<title>a run</title>")
    notebooks.text_page(as_written).write_text("<title>as written</title>")
    text = page._notebooks()
    links = dict((unescape(title), href) for href, title in LINK.findall(text))
    assert set(links) == {notebooks.title(run), notebooks.title(as_written)}
    for href in links.values():
        assert href.startswith(notebooks.GRADIO_FILES)
        path = Path(unquote(href.removeprefix(notebooks.GRADIO_FILES)))
        assert path.is_file() and path.parent == notebooks.PAGES
    assert Path(unquote(links[notebooks.title(run)].removeprefix(notebooks.GRADIO_FILES))) == notebooks.run_page(run)
    assert f"{escape(notebooks.title(as_written))}</a> (not run yet: no figures)" in text
    for name in none:
        assert f"* {escape(notebooks.title(name))} (not rendered yet): {page.NOTEBOOK_LINES[name]}" in text
    assert text.count("`make notebooks-html`") == 1 and "`make notebooks`" in text
    demo = SimpleNamespace(queue=lambda **_: None, _queue=SimpleNamespace(), launch=lambda **kwargs: kwargs)
    assert str(notebooks.PAGES) in page.launch(demo)["allowed_paths"]     # the folder the links point into


def test_every_page_run_means_no_line_asking_for_a_run(tmp_path, monkeypatch):
    monkeypatch.setattr(notebooks, "PAGES", tmp_path)
    for name in page.NOTEBOOK_LINES:
        notebooks.run_page(name).write_text("<title>a run</title>")
    text = page._notebooks()
    assert len(LINK.findall(text)) == len(page.NOTEBOOK_LINES)
    assert "make notebooks-html" not in text and "not run yet" not in text
