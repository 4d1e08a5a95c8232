"""Every notebook runs top to bottom on a fresh kernel, on the short budget, and its own assert
cells hold. Notebooks that load the embedded pair are marked ``real`` (one kernel at a time);
01 needs no model. Outputs are stripped from git."""
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def _needs_models(path: Path) -> bool:
    text = path.read_text()
    return "load_pair" in text or "load_model" in text


@pytest.mark.parametrize("path", [pytest.param(p, marks=[pytest.mark.real] if _needs_models(p) else [])
                                  for p in NOTEBOOKS], ids=lambda p: p.name)
def test_notebook_executes_on_the_short_budget(path, monkeypatch):
    monkeypatch.setenv("SPECDEC_NOTEBOOK_BUDGET", "short")  # the kernel inherits this process's environment
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=1200, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert outputs and not any(o.get("output_type") == "error" for o in outputs)
    assert any("assert " in c.source for c in nb.cells if c.cell_type == "code"), "a notebook states its checks"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_outputs_are_stripped_in_git(path):
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, f"{path.name}: run `make strip-notebooks`"


def test_the_page_and_the_notebooks_link_to_each_other():
    from specdec_ui.layout import NOTEBOOK_LINES, _notebooks
    assert set(NOTEBOOK_LINES) == {p.stem for p in NOTEBOOKS}
    page = _notebooks()
    for path in NOTEBOOKS:
        assert f"{path.name}" in page and NOTEBOOK_LINES[path.stem] in page
        first = nbformat.read(path, as_version=4).cells[0]
        assert first.cell_type == "markdown" and "**In the app** (`make app`" in first.source, path.name
