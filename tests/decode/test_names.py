"""Names instead of strings: why drafting or a run ended, a token's status and a drafter are written
as names (the enums of :mod:`specdec.trace`, the entries of :mod:`specdec.decode.registry`), never
as string literals, outside the two modules that declare them.

The issue's check is ``git grep -nE '"(k|budget|tree_budget|lookup)"' specdec``; this one reads the
parsed source, so that a record's field read by its key (``shape["k"]``) is not taken for a name,
and it knows the other values of the same names too.
"""
from __future__ import annotations

import ast

from helpers import ROOT, tiny

from specdec import DecodeConfig, Generation, TraceFile, make_drafter
from specdec.decode.registry import DRAFTERS, HYBRID
from specdec.trace import DraftedBy, DraftStop, NextKind, RunStop, Status

DECLARED = {"specdec/trace.py", "specdec/decode/registry.py"}
# the values no other word of the code shares ("model", "tree", "none", "context" or "plain" do)
NAMES = {"k", "budget", "tree_budget", "lookup", "hybrid", "no_match", "copy_end", "stop_token", "unreached",
         "after_stop", "untested", "resampled", "bonus", "paced"}


def _literals(path) -> list[tuple[int, str]]:
    """(line, value) of every string literal in ``path`` that is one of NAMES, but a subscript's key."""
    tree = ast.parse(path.read_text())
    keys = {id(node.slice) for node in ast.walk(tree) if isinstance(node, ast.Subscript)}
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and node.value in NAMES and id(node) not in keys]


def test_no_stop_reason_status_or_drafter_is_a_string_literal_outside_its_declaration():
    found = [f"{path.relative_to(ROOT)}:{line}: {value!r}" for path in sorted(ROOT.glob("specdec/**/*.py"))
             if str(path.relative_to(ROOT)) not in DECLARED for line, value in _literals(path)]
    assert found == []


def test_the_names_checked_are_names_of_the_trace_or_the_registry():
    declared = {str(m) for e in (Status, NextKind, DraftStop, DraftedBy) for m in e} | set(DRAFTERS)
    assert NAMES <= declared


def test_the_check_finds_a_literal_where_there_is_one(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text('stop = r.draft_stop == "budget"\nwords = {"k": "K reached"}\nshape = s["k"]\n')
    assert _literals(planted) == [(1, "budget"), (2, "k")]


def test_a_trace_read_back_holds_the_names_and_writes_the_same_json(pair):
    prompt = tiny.prompt_ids(seed=4) * 2  # repeated text: the hybrid copies some rounds and models others
    gen = Generation(pair, prompt, DecodeConfig(max_new_tokens=24, k=4), make_drafter(HYBRID.name, pair)).run()
    written = TraceFile({}, tuple(gen.rounds), gen.prefill_s, gen.text, gen.stop_reason).to_json()
    back = TraceFile.from_json(written)
    assert back.to_json() == written and back.rounds == tuple(gen.rounds) and back.stop_reason == gen.stop_reason
    assert type(gen.stop_reason) is RunStop
    assert {r.drafted_by for r in back.rounds} == {DraftedBy.LOOKUP, DraftedBy.MODEL}
    for r in back.rounds:
        assert type(r.draft_stop) is DraftStop and type(r.drafted_by) is DraftedBy
        assert r.next_kind is None or type(r.next_kind) is NextKind
        assert all(type(p.status) is Status for p in r.positions)
