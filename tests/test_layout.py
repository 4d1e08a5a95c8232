"""The house's shape: sub-packages by job, imports that only run downward, no import circle.

The import graph is read from the source (every ``import`` and ``from ... import``, those inside
functions too, but not those under ``if TYPE_CHECKING:``), so a lazy import cannot hide a circle.
Ranks, lowest first: the two leaves (``options``, ``trace``), then ``model``, ``weights``,
``decode``, ``teach``, and last the command line; ``specdec_ui`` sits above all of ``specdec``, and
``specdec`` never imports the UI, gradio or plotly.
"""
from __future__ import annotations

import ast
import subprocess
import sys

from helpers import ROOT

RANK = {"options": 0, "trace": 0, "model": 1, "weights": 2, "decode": 3, "teach": 4, "cli": 5, "__main__": 5}
TOP_LEVEL = {"__init__.py", "__main__.py", "cli.py", "options.py", "trace.py"}


def _module(path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _type_checking_lines(tree: ast.AST) -> set[int]:
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for inner in node.body:
                lines |= set(range(inner.lineno, inner.end_lineno + 1))
    return lines


def _imports(path, known: set[str]) -> set[str]:
    """The project modules ``path`` imports (``from pkg import mod`` counts as importing ``pkg.mod``)."""
    me = _module(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    tree = ast.parse(path.read_text())
    skip = _type_checking_lines(tree)
    out = set()
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skip:
            continue
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            names = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name != me:
                out.add(name)
    return out


def _graph() -> dict[str, set[str]]:
    files = sorted([*ROOT.glob("specdec/**/*.py"), *ROOT.glob("specdec_ui/**/*.py")])
    known = {_module(f) for f in files}
    # importing a package runs its __init__, but "specdec" itself is the lazy public API: not an edge
    return {_module(f): _imports(f, known) - {"specdec"} for f in files}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10_000)
    for v in graph:
        if v not in index:
            visit(v)
    return out


def _rank(module: str) -> int | None:
    parts = module.split(".")
    return RANK.get(parts[1]) if parts[0] == "specdec" and len(parts) > 1 else None


def test_there_is_no_import_circle():
    assert _cycles(_graph()) == []


def test_a_planted_circle_is_found():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_imports_run_only_downward():
    upward = [f"{m} -> {d}" for m, deps in _graph().items() for d in deps
              if _rank(m) is not None and _rank(d) is not None and _rank(d) > _rank(m)]
    into_ui = [f"{m} -> {d}" for m, deps in _graph().items() for d in deps
               if m.startswith("specdec.") and d.startswith("specdec_ui")]
    assert upward == [] and into_ui == []


def test_the_engine_never_imports_the_ui_libraries():
    files = ROOT.glob("specdec/**/*.py")
    found = [f"{f.relative_to(ROOT)}: {n}" for f in files for n in ("gradio", "plotly")
             if any(line.lstrip().startswith((f"import {n}", f"from {n}")) for line in f.read_text().splitlines())]
    assert found == []


def test_every_module_of_specdec_sits_in_a_sub_package_but_the_top_level_ones():
    loose = sorted(p.name for p in (ROOT / "specdec").glob("*.py") if p.name not in TOP_LEVEL)
    assert loose == []
    assert {p.name for p in (ROOT / "specdec").iterdir() if p.is_dir() and p.name != "__pycache__"} == \
        {"model", "weights", "decode", "teach"}


def test_every_package_says_what_it_holds():
    silent = [str(p.relative_to(ROOT)) for p in [*ROOT.glob("specdec/**/__init__.py"), *ROOT.glob("specdec_ui/**/__init__.py"),
                                                 ROOT / "benchmarks/__init__.py", ROOT / "tests/helpers/__init__.py"]
              if not ast.get_docstring(ast.parse(p.read_text()))]
    assert silent == []


def test_the_rule_imports_without_transformers_or_the_models():
    code = ("import sys, specdec.decode.rule, specdec; "
            "print(sorted(m for m in ('transformers', 'specdec.weights.loading', 'gradio') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert out.strip() == "[]"
