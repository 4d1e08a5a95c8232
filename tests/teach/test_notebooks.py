"""Every notebook runs top to bottom on the short budget, and its own assert cells hold; each run is
written as the notebook's page, the app's link (so ``make test`` leaves every page rendered, with no
second run). Outputs are stripped from git.

A notebook that needs no model runs on a fresh Jupyter kernel, as a learner's would. The notebooks
that load the embedded pair (marked ``real``; all of them, 01 for its opening measurement) run in a
fresh IPython namespace **in this process**: their ``load_pair`` then finds the pair this session
already loaded (the models are loaded once per test session, as everywhere else), instead of loading
it again in each notebook's kernel. 04 is the
exception: it holds transformers' float32 verifier (about 7 GB), which beside the session's pair
would take ``make test`` past the 8 GB of a learner's laptop. It is marked ``alone``, so it runs
first, before anything has loaded the session's pair, and the pair it loads itself (after its
float32 models are gone) is dropped when it ends.

**Exercises.** Each notebook has two to four, each a markdown cell headed ``### Try N`` whose answer
is hidden in ``<details>``; at least one asks why, or asks the learner to break something and explain
what they see. An exercise that changes code names its variants (``<!-- variant: NAME -->``); a
variant lives in the metadata of the code cell the learner edits, ``{"variants": [{"name", "old",
"new", "check"}]}``: ``old`` appears once in that cell and becomes ``new``, and ``check`` is the
exercise's stated answer as code. :func:`test_exercise_variant` runs the whole notebook with the
edit, its own final checks included, and then ``check``: an exercise can never break its notebook.
"""
import copy
import ctypes
import re
import sys
from html import escape
from pathlib import Path

import nbformat
import pytest
from helpers.notebooks import render_script

from specdec_ui import notebooks

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


ALONE = {"04_optimisation_journey"}  # loads float32 verifiers: never beside the session's pair
# glibc keeps heap that a cell's `del model; gc.collect()` freed, in holes the next model's large tensors cannot
# reuse (a float32 model's dequantization leaves many): handed back after each cell, where the C library can
MALLOC_TRIM = getattr(ctypes.CDLL(None), "malloc_trim", None)


def _needs_models(path: Path) -> bool:
    text = path.read_text()
    return "load_pair" in text or "load_model" in text


def _marks(path: Path) -> list:
    marks = [pytest.mark.real] if _needs_models(path) else []
    return marks + ([pytest.mark.alone] if path.stem in ALONE else [])


def run_in_this_process(nb) -> None:
    """Each code cell in order in a fresh IPython namespace, its output recorded as a kernel's
    would be; the first failing cell fails the test with its traceback. Pairs a notebook loads
    beyond the session's default one are dropped afterwards, as a kernel's end would free them, and
    the heap each cell frees goes back to the system, so that one model's leftovers never lie under
    the next."""
    import plotly.io as pio
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    from specdec.weights import loading
    shell = InteractiveShell.instance()
    shell.reset(new_session=True)
    pairs, renderer = set(loading._PAIRS), pio.renderers.default
    pio.renderers.default = "plotly_mimetype"  # fig.show() displays (captured), never opens a browser
    try:
        for i, cell in enumerate(c for c in nb.cells if c.cell_type == "code"):
            with capture_output() as out:
                # the cell's value in its rich forms too (an SVG, HTML), as a kernel records it
                shell.display_trap.hook = sys.displayhook
                result = shell.run_cell(cell.source, store_history=False)
            cell.execution_count = i + 1
            cell.outputs = [nbformat.v4.new_output("stream", name=n, text=t)
                            for n, t in (("stdout", out.stdout), ("stderr", out.stderr)) if t]
            cell.outputs += [nbformat.v4.new_output("display_data", data=o.data) for o in out.outputs if o.data]
            if not result.success:
                raise AssertionError(f"code cell {i} failed:\n{cell.source[:400]}\n---\n{out.stdout[-3000:]}")
            if MALLOC_TRIM is not None:
                MALLOC_TRIM(0)
    finally:
        pio.renderers.default, shell.display_trap.hook = renderer, shell.displayhook
        for key in set(loading._PAIRS) - pairs:
            del loading._PAIRS[key]
        shell.reset(new_session=True)


@pytest.mark.parametrize("path", [pytest.param(p, marks=_marks(p)) for p in NOTEBOOKS], ids=lambda p: p.name)
def test_notebook_executes_on_the_short_budget(path, monkeypatch, request):
    monkeypatch.setenv("SPECDEC_NOTEBOOK_BUDGET", "short")  # the kernel inherits this process's environment
    nb = nbformat.read(path, as_version=4)
    if _needs_models(path):
        if path.stem not in ALONE:
            request.getfixturevalue("real_pair")  # the session's pair, which the notebook's load_pair finds
        monkeypatch.chdir(ROOT)
        monkeypatch.syspath_prepend(str(ROOT))  # as a kernel started in ROOT has it: `import benchmarks`
        run_in_this_process(nb)
    else:
        render_script().execute(nb)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert outputs and not any(o.get("output_type") == "error" for o in outputs)
    assert any("assert " in c.source for c in nb.cells if c.cell_type == "code"), "a notebook states its checks"
    assert render_script().write_page(nb, path.stem, "short") == notebooks.run_page(path.stem)


def variants(nb) -> list[dict]:
    """The exercise variants of ``nb``, in cell order (see the module docstring)."""
    return [v for c in nb.cells if c.cell_type == "code" for v in c.metadata.get("variants", [])]


def with_variant(nb, name: str):
    """A copy of ``nb`` with the variant ``name``'s edit made, and its check as a last cell."""
    nb = copy.deepcopy(nb)
    (cell, variant), = [(c, v) for c in nb.cells if c.cell_type == "code"
                        for v in c.metadata.get("variants", []) if v["name"] == name]
    assert cell.source.count(variant["old"]) == 1, f"variant {name}: {variant['old']!r} must appear once in its cell"
    cell.source = cell.source.replace(variant["old"], variant["new"])
    nb.cells.append(nbformat.v4.new_code_cell(variant["check"]))
    return nb


EXERCISE = re.compile(r"^### Try \d+", re.M)
VARIANT_NAME = re.compile(r"<!-- variant: ([\w-]+) -->")


def exercises(nb) -> list[str]:
    return [c.source for c in nb.cells if c.cell_type == "markdown" and EXERCISE.match(c.source)]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_exercises_hide_their_answers_and_each_names_its_variants(path):
    nb = nbformat.read(path, as_version=4)
    found = exercises(nb)
    assert 2 <= len(found) <= 4, f"{path.name}: {len(found)} exercises (### Try N), 2 to 4 wanted"
    for text in found:
        assert "<details>" in text and "<summary>" in text and "</details>" in text, \
            f"{path.name}: the answer of {text.splitlines()[0]!r} is not hidden in <details>"
        before = text.split("<details>")[0].lower()
        assert "answer" not in before, f"{path.name}: {text.splitlines()[0]!r} gives its answer before <details>"
    assert any(re.search(r"\bwhy\b|\bbreak\b|explain", t.split("<details>")[0], re.I) for t in found), \
        f"{path.name}: no exercise asks why, or asks to break something and explain"
    named = [n for t in found for n in VARIANT_NAME.findall(t)]
    have = [v["name"] for v in variants(nb)]
    assert sorted(named) == sorted(have) and len(set(have)) == len(have), \
        f"{path.name}: exercises name variants {sorted(named)}, the cells carry {sorted(have)}"
    assert all(VARIANT_NAME.search(t) for t in found), f"{path.name}: every exercise runs at least one variant"


VARIANTS = [pytest.param(p, v["name"], marks=_marks(p), id=f"{p.stem}:{v['name']}")
            for p in NOTEBOOKS for v in variants(nbformat.read(p, as_version=4))]


@pytest.mark.parametrize("path,name", VARIANTS)
def test_exercise_variant(path, name, monkeypatch, request):
    """The notebook with one exercise's edit runs to its end, its own checks included, and the
    exercise's stated answer holds."""
    monkeypatch.setenv("SPECDEC_NOTEBOOK_BUDGET", "short")
    if _needs_models(path) and path.stem not in ALONE:
        request.getfixturevalue("real_pair")
    monkeypatch.chdir(ROOT)
    monkeypatch.syspath_prepend(str(ROOT))
    run_in_this_process(with_variant(nbformat.read(path, as_version=4), name))


def test_a_variant_is_applied_and_its_check_runs():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("k = 4\nx = k * 2", metadata={
        "variants": [{"name": "k1", "old": "k = 4", "new": "k = 1", "check": "assert x == 2"}]})])
    varied = with_variant(nb, "k1")
    assert varied.cells[0].source == "k = 1\nx = k * 2" and varied.cells[-1].source == "assert x == 2"
    assert nb.cells[0].source == "k = 4\nx = k * 2"  # the original is left as it was
    run_in_this_process(varied)
    wrong = with_variant(nb, "k1")
    wrong.cells[-1].source = "assert x == 8"
    with pytest.raises(AssertionError, match="code cell 1 failed"):
        run_in_this_process(wrong)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_outputs_are_stripped_in_git(path):
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, f"{path.name}: run `make strip-notebooks`"


def test_the_page_and_the_notebooks_link_to_each_other():
    from specdec_ui.page import NOTEBOOK_LINES, _notebooks
    assert set(NOTEBOOK_LINES) == {p.stem for p in NOTEBOOKS}
    page = _notebooks()
    for path in NOTEBOOKS:
        assert escape(notebooks.title(path.stem)) in page and NOTEBOOK_LINES[path.stem] in page
        first = nbformat.read(path, as_version=4).cells[0]
        assert first.cell_type == "markdown" and "**In the app** (`make app`" in first.source, path.name
