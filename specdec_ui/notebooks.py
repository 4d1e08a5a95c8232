"""The notebooks as pages this app serves: where each one's rendered HTML lies, and its title.

``make notebooks-html`` (``scripts/render_notebooks.py``) writes every notebook as written (text and
code, no figures), then runs each once and writes it again with its outputs; the test run that
executes the notebooks writes the same run pages as it goes. All lie in :data:`PAGES`, which
:func:`~.layout.launch` serves. No third-party import here: the app runs without the notebook tools.
"""
from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import quote

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
PAGES = NOTEBOOKS / "html"  # gitignored
GRADIO_FILES = "gradio_api/file="  # relative, so the link holds under a proxy's root path too


def run_page(name: str) -> Path:
    """The page of the notebook's last run: its outputs and figures."""
    return PAGES / f"{name}.html"


def text_page(name: str) -> Path:
    """The page of the notebook as written, for where it has not run yet: its text, no outputs."""
    return PAGES / f"{name}.as-written.html"


def title(name: str) -> str:
    """The notebook's own heading: the first line of its first cell, a markdown ``# `` heading."""
    source = json.loads((NOTEBOOKS / f"{name}.ipynb").read_text())["cells"][0]["source"]
    first = ("".join(source) if isinstance(source, list) else source).splitlines()[0]
    return first.removeprefix("# ").strip()


def href(page: Path) -> str:
    return GRADIO_FILES + quote(str(page))
