"""Every notebook as a page with its figures, for the app's links (``make notebooks-html``).

    python scripts/render_notebooks.py [NAME ...]     # default: every notebook in notebooks/

First writes each notebook as written (seconds; its text and code, marked "not run yet: no figures"),
then runs each once, top to bottom on a fresh kernel as a learner would (``SPECDEC_NOTEBOOK_BUDGET``,
``short`` by default), and writes it with its outputs. The pages go to ``notebooks/html/``; plotly.js
is written once beside them, so a page needs no network. The test run that executes the notebooks
writes the same run pages with :func:`write_page`.
"""
from __future__ import annotations

import argparse
import copy
import datetime
import os
import sys
from pathlib import Path

import jinja2
import nbformat
import plotly.io as pio
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError
from nbconvert import HTMLExporter
from plotly.offline import get_plotlyjs, get_plotlyjs_version

from specdec_ui import notebooks

PLOTLY_MIME = "application/vnd.plotly.v1+json"
# JupyterLab's page without its CDN scripts (require.js, MathJax, mermaid: the notebooks use none of
# them) and with the plotly.js written beside the page instead.
OFFLINE = """{%- extends 'index.html.j2' -%}
{%- block html_head_js -%}<script src="{{ resources.plotly_js }}"></script>{%- endblock html_head_js -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
"""


def _banner(name: str, budget: str | None) -> str:
    if budget is None:
        return (f"**Not run yet: no figures.** This is `notebooks/{name}.ipynb` as written. `make notebooks-html` "
                "runs it and writes this page again with its outputs and figures (`make test` does too).")
    day = datetime.date.today().isoformat()
    return (f"*This page: `notebooks/{name}.ipynb` run top to bottom on this machine on {day}, on the `{budget}` "
            "budget (`SPECDEC_NOTEBOOK_BUDGET`); every number and figure below is that run's. "
            "`make notebooks` opens it in Jupyter.*")


def _with_figures(nb) -> None:
    """Each plotly figure, which a notebook front end draws from its JSON, as HTML that draws it."""
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            figure = output.get("data", {}).get(PLOTLY_MIME)
            if figure is not None:
                output.data["text/html"] = pio.to_html(figure, config=figure.get("config"), include_plotlyjs=False,
                                                       full_html=False, validate=False)


def execute(nb) -> None:
    """Run ``nb`` top to bottom on a fresh kernel started in the repository root, as a learner's would."""
    NotebookClient(nb, timeout=1800, kernel_name="python3",
                   resources={"metadata": {"path": str(notebooks.ROOT)}}).execute()


def write_page(nb, name: str, budget: str | None) -> Path:
    """Write ``nb`` as ``name``'s run page, with the outputs of its run on ``budget``, or (``budget``
    None) as its page as written. Returns the page's path."""
    notebooks.PAGES.mkdir(parents=True, exist_ok=True)
    plotly_js = notebooks.PAGES / f"plotly-{get_plotlyjs_version()}.min.js"
    if not plotly_js.exists():
        plotly_js.write_text(get_plotlyjs())
    nb = copy.deepcopy(nb)
    _with_figures(nb)
    nb.cells.insert(0, nbformat.v4.new_markdown_cell(_banner(name, budget)))
    nb.metadata["title"] = notebooks.title(name)
    exporter = HTMLExporter(extra_loaders=[jinja2.DictLoader({"offline.html.j2": OFFLINE})],
                            template_file="offline.html.j2")
    html, _ = exporter.from_notebook_node(nb, resources={"plotly_js": plotly_js.name})
    page = notebooks.run_page(name) if budget else notebooks.text_page(name)
    partial = page.with_suffix(".partial")  # the app may be serving the old page while this one is written
    partial.write_text(html)
    partial.replace(page)
    return page


def main(argv: list[str] | None = None) -> int:
    every = sorted(p.stem for p in notebooks.NOTEBOOKS.glob("*.ipynb"))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", choices=every, metavar="NAME", help=f"default: all of {', '.join(every)}")
    names = parser.parse_args(argv).names or every
    budget = os.environ.setdefault("SPECDEC_NOTEBOOK_BUDGET", "short")  # the kernels inherit it
    read = {name: nbformat.read(notebooks.NOTEBOOKS / f"{name}.ipynb", as_version=4) for name in names}
    for name, nb in read.items():
        write_page(nb, name, None)
    failed = []
    for name, nb in read.items():
        print(f"running {name} ({budget} budget) ...", flush=True)
        try:
            execute(nb)
        except CellExecutionError as error:
            print(f"{name} failed, its page stays as written:\n{str(error)[-2000:]}", file=sys.stderr)
            failed.append(name)
            continue
        print(f"wrote {write_page(nb, name, budget)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
