"""No check asserts on a measured time, speed or cost fit: those are shown, never asserted (STYLE.md).

A machine that another process keeps busy moves every clock reading, so an assert that orders one
against a threshold fails some day for no fault in the code (issue 29: notebook 03's S/S' comparison
did, in ``make test`` on a busy machine). The rule this test applies to every ``assert`` in the
notebooks' code cells and in ``tests/*.py``:

    **An assert is clock-bound when it orders (<, <=, >, >=) a quantity whose name is a clock's.**
    A name is a clock's when an identifier an operand reads (a name, an attribute, or a string key it
    subscripts with; inside a comprehension, also what it iterates over) matches CLOCK_WORDS: a word
    part (split at ``_``) ``time``, ``times``, ``elapsed``, ``speed``, ``speedup``, ``seconds``, ``perf``,
    ``fit``, ``costs``; a unit suffix ``_ms`` or ``_s`` after a name (``wall_s``, ``tokens_per_s``,
    ``a_ms``); ``tok_s`` anywhere; or a cost of the notation card (``t_f``, ``t_r``, ``d_f``, ``d_r``, ``t1``).

Not clock-bound: an equality (a recorded or faked time compared with what was recorded or faked is
exact); a sign check, the other side the literal 0, of a measured time or rate (positive by
definition), unless it is a fitted coefficient (FIT_WORDS: a fit's intercept or slope can come out
negative on a busy machine); and an assert whose line ends with ``# not a clock assert: <why>``,
which says why its order cannot depend on the machine's load. A clock-bound assert must go: print
the number instead. The rule reads names, so a measured quantity under a neutral name escapes it
(03's old ``gaps`` of measured over predicted speed-up would have): name a measurement for what it is.
"""
import ast
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CLOCK_WORDS = re.compile(r"(^|_)(time|times|elapsed|speed|speedup|seconds|perf|fit|costs)(_|$)|.+_(ms|s)$|tok_s"
                         r"|^(t_f|t_r|d_f|d_r|t1)$")
FIT_WORDS = re.compile(r"(^|_)(fit|costs|slope|intercept)(_|$)|^(a_ms|b_ms|b_ms_per_token|t_f|t_r|d_f|d_r)$")
ORDER = (ast.Lt, ast.LtE, ast.Gt, ast.GtE)
OPT_OUT = "# not a clock assert:"


def _identifiers(node: ast.AST) -> set[str]:
    out = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            out.add(n.id)
        elif isinstance(n, ast.Attribute):
            out.add(n.attr)
        elif isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Constant) and isinstance(n.slice.value, str):
            out.add(n.slice.value)
    return out


def _clocked(names: set[str]) -> set[str]:
    return {n for n in names if CLOCK_WORDS.search(n)}


def _orders_a_clock(test: ast.AST) -> set[str]:
    """The clock names an order comparison inside ``test`` reads, sign checks of measurements excepted."""
    fed = {}  # comparison node -> names of the comprehension iterables around it
    for n in ast.walk(test):
        if isinstance(n, (ast.GeneratorExp, ast.ListComp, ast.SetComp)):
            iterated = set().union(*(_identifiers(g.iter) for g in n.generators))
            for inner in ast.walk(n.elt):
                fed[inner] = fed.get(inner, set()) | iterated
    found = set()
    for n in ast.walk(test):
        if not isinstance(n, ast.Compare):
            continue
        operands = [n.left, *n.comparators]
        for op, left, right in zip(n.ops, operands, operands[1:]):
            if not isinstance(op, ORDER):
                continue
            names = _clocked(_identifiers(left) | _identifiers(right) | fed.get(n, set()))
            zero = any(isinstance(side, ast.Constant) and side.value == 0 for side in (left, right))
            if names and not (zero and not any(FIT_WORDS.search(x) for x in names)):
                found |= names
    return found


def clock_bound(source: str) -> list[str]:
    """The clock-bound asserts of ``source`` (Python), as 'line: text (reads ...)'."""
    try:
        tree = ast.parse(source)
    except SyntaxError:  # a notebook cell with IPython syntax: not Python, nothing to check
        return []
    lines = source.splitlines()
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assert) and OPT_OUT not in lines[node.end_lineno - 1]:
            names = _orders_a_clock(node.test)
            if names:
                found.append(f"{node.lineno}: {ast.get_source_segment(source, node)} (reads {sorted(names)})")
    return found


def _sources():
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for i, cell in enumerate(json.loads(path.read_text())["cells"]):
            if cell["cell_type"] == "code":
                yield f"{path.name} cell {i}", "".join(cell["source"])
                for v in cell.get("metadata", {}).get("variants", []):  # an exercise's stated answer, as code
                    yield f"{path.name} cell {i} variant {v['name']}", v["check"]
    for path in sorted((ROOT / "tests").rglob("*.py")):
        if path.name != Path(__file__).name:
            yield path.name, path.read_text()


def test_no_notebook_or_test_asserts_on_a_clock():
    found = [f"{where} line {hit}" for where, text in _sources() for hit in clock_bound(text)]
    assert not found, "asserts on measured times (show them instead):\n" + "\n".join(found)


@pytest.mark.parametrize("planted", [
    "assert tok_s > 1", "assert gen.summary().tokens_per_s > 2.5", "assert costs['verify'][1] >= 0",
    "assert verify_fit['a_ms'] > 0 and verify_fit['b_ms_per_token'] > 0", "assert speedup > 1.0",
    "assert time.perf_counter() - t0 < 5", "assert results['wall_s'] < 10", "assert elapsed <= 3",
    "assert all(v > 1 for v in data['tok_s'].values())", "assert abs(speedup['S'] - 1) < abs(speedup['Sp'] - 1)",
    "assert t_f > 0"])
def test_the_rule_catches_a_planted_clock_assert(planted):
    assert clock_bound(planted), planted


@pytest.mark.parametrize("fine", [
    "assert len(tokens) == 3", "assert g.token_ids == b.token_ids", "assert a == pytest.approx(8 / 9)",
    "assert s.tokens_per_round <= K + 1", "assert r['tok_s'] == pytest.approx(129 / 5.861)",
    "assert c['tok_s'] > 0 and c['speedup'] > 0", "assert all(v > 0 for v in data['tok_s'].values())",
    "assert saved['timings_ms']['int8'] == [1.0, 2.0]",
    "assert models_ready_s <= wall_s  # not a clock assert: an event inside the run comes before its end"])
def test_the_rule_passes_invariants(fine):
    assert not clock_bound(fine), fine
