"""The Compare tab as plain functions on tiny random models (no real models, no browser): the race, the
verdict, the outputs token for token, and why the speed-up is what it is."""
from __future__ import annotations

import re

import pytest
from helpers.ui import form, tree_form

from specdec.teach.render import first_difference
from specdec_ui.state import Session
from specdec_ui.tabs import compare as compare_tab
from specdec_ui.tabs.compare import CompareView


def test_first_difference():
    assert first_difference([1, 2, 3], [1, 2, 3]) is None
    assert first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert first_difference([1, 2], [1, 2, 3]) == 2


@pytest.mark.parametrize("runs", [0, 6, 2.5, None, "3"])
def test_compare_refuses_a_bad_number_of_runs(loader, runs):
    (problem,) = list(compare_tab.compare(loader, Session(), form(), runs))
    assert problem.field == "runs" and problem.message.startswith("Runs must be a whole number in [1, 5]")


def test_compare_at_temperature_zero_shows_the_identical_badge_and_the_why(loader):
    views = list(compare_tab.compare(loader, Session(), form(temperature=0.0, max_new_tokens=12)))
    final = views[-1]
    assert isinstance(final, CompareView) and all(v.verdict == "" for v in views[:-1])  # no verdict while it runs
    n = int(final.race.data[0].y[-1])                             # the verifier-only run's tokens
    assert 'class="cmp-verdict cmp-identical" role="status"' in final.verdict
    assert f"Identical output: {n} of {n} tokens" in final.verdict and "Identical" not in final.badge
    assert f"The same {n} tokens in both outputs" in final.aligned and "al-col" not in final.aligned  # one text
    assert final.base_text.replace("Verifier only", "") == final.spec_text.replace("Speculative", "")
    assert "No text yet" not in final.base_text and final.tree_text == ""
    assert "**Speed-up**" in final.badge and "the prefill excluded" in final.badge and "One run" in final.badge
    assert len(final.race.data) == 2 and final.live == ""
    assert final.why.startswith("**Why ") and "c = " in final.why and final.why_chart is not None
    assert "Draft noise" not in final.why and "gains more than prose" not in final.why


def test_compare_at_temperature_above_zero_does_equal_work_over_several_runs(loader, pair):
    s = Session()
    final = list(compare_tab.compare(loader, s, form(temperature=1.0, max_new_tokens=10), runs=3))[-1]
    assert "cmp-by-design" in final.verdict and "Sampling: outputs differ by design" in final.verdict
    assert "median of 3 runs; range" in final.badge
    assert "median of 3 runs" in final.base_stats and "median of 3 runs" in final.spec_stats
    assert len(final.race.data) == 6
    # every run generated exactly max-new-tokens tokens: a stop token does not end one early
    assert all(t.y[-1] == 10 for t in final.race.data)


def aligned_rows(html: str) -> tuple[str, list[str]]:
    """The aligned view's shared text, and each output's row of cells joined, as a reader sees them
    (whitespace markers are CSS, not text)."""
    from html.parser import HTMLParser

    class Cells(HTMLParser):
        def __init__(self):
            super().__init__()
            self.stack, self.same, self.rows = [], "", {}

        def handle_starttag(self, tag, attrs):
            classes = (dict(attrs).get("class") or "").split()
            self.stack.append(classes)

        def handle_endtag(self, tag):
            self.stack.pop()

        def handle_data(self, data):
            if any("cmp-same" in c for c in self.stack):
                self.same += data
            cell = next((c for c in self.stack if "al-cell" in c), None)
            if cell and not any("al-key" in c for c in self.stack):
                row = int(next(c for c in cell if c.startswith("al-r"))[4:])
                self.rows[row] = self.rows.get(row, "") + data
    p = Cells()
    p.feed(html)
    return p.same, [p.rows[r] for r in sorted(p.rows)]


def test_the_aligned_outputs_line_up_token_for_token_and_mark_the_first_difference():
    base = [(1, "def"), (2, " f"), (3, "():\n"), (4, "    return"), (5, " 1")]
    spec = [(1, "def"), (2, " f"), (3, "():\n"), (6, "    pass"), (5, " 1"), (7, " # end")]
    html = compare_tab.aligned_html({"verifier only": base, "speculative": spec}, settled=True)
    same, rows = aligned_rows(html)
    assert same == "def f():\n"                                     # the shared start, once, as text
    # each row is its output token for token from there (the line breaks fall between columns)
    assert rows == ["    return 1", "    pass 1 # end"]
    assert html.count('class="al-col al-first"') == 1 and 'data-n="4"' in html   # "    pass": token 4
    assert html.count("al-diff") == 2                              # "    pass" and " # end" (after verifier only's end)
    assert html.count("al-none") == 1 and "Tokens 1–3 are the same in both outputs" in html
    # while the runs go, a token the other side has not reached yet differs from nothing
    ahead = compare_tab.aligned_html({"verifier only": base[:3], "speculative": spec[:4]}, settled=False)
    assert "al-diff" not in ahead and "al-first" not in ahead and "one run is ahead" in ahead
    twins = compare_tab.aligned_html({"verifier only": base, "chain": base, "tree": base}, settled=True)
    assert "The same 5 tokens in all 3 outputs" in twins and "al-col" not in twins
    assert aligned_rows(twins)[0] == "".join(t for _, t in base)
    assert compare_tab.aligned_html({"verifier only": [], "speculative": []}, settled=False) == ""


def test_why_names_draft_noise_when_it_is_on_and_a_is_one_number(loader):
    noisy = list(compare_tab.compare(loader, Session(), form(temperature=0.0, max_new_tokens=12, draft_noise=0.5)))[-1]
    assert "**Draft noise e = 0.50** was on" in noisy.why and "a / (1 − e)" in noisy.why
    assert "gains more than prose" not in noisy.why
    # one acceptance figure, a = kept / tested, the same in the column and in Why
    a = re.search(r"\*\*a = ([\d.]+)\*\* = drafts kept / tested = (\d+) / (\d+)", noisy.spec_stats)
    assert a and f"**a = {a.group(1)}** (the column's a, kept / tested)" in noisy.why
    assert f"{int(a.group(2)) / int(a.group(3)):.2f}" == a.group(1)
    assert "acceptance" not in noisy.spec_stats and "kept / drafted" not in noisy.spec_stats
    # the figure is the round's tokens over its cost in verifier-only steps: the sentence's own arithmetic
    said = re.search(r"Why ([\d.]+)x\?\*\* A speculative round gave \*\*([\d.]+) tokens\*\*.*?"
                     r"\*\*([\d.]+) verifier-only steps\*\*.*?: \2 / \3 = \1x", noisy.why)
    assert said, noisy.why
    plain = list(compare_tab.compare(loader, Session(), form(temperature=0.0, max_new_tokens=12)))[-1]
    assert "Draft noise" not in plain.why


@pytest.mark.parametrize("code,prose,said", [
    ((30, 30), (5, 30), "Code drafted better than prose in this text: words of code (keywords and identifiers) kept "
                        "100% (30 of 30), words of prose 17% (5 of 30)"),
    ((3, 30), (25, 30), "Prose drafted better than code"),
    ((15, 30), (14, 30), ""),                                     # a gap within sampling noise
    ((30, 30), (1, 9), "")])                                      # too few words of prose to compare
def test_why_names_the_kind_of_text_only_when_the_counts_say_so(monkeypatch, code, prose, said):
    from specdec.teach import tokenkind
    counts = (tokenkind.KindCount(tokenkind.KEYWORD, 0, 0), tokenkind.KindCount(tokenkind.IDENTIFIER, *code),
              tokenkind.KindCount(tokenkind.WORD, *prose))
    monkeypatch.setattr(compare_tab, "acceptance_by_kind", lambda *runs: counts)
    sentence = compare_tab._text_kind([])
    assert (said in sentence and sentence != "") if said else sentence == ""


def test_with_the_tree_drafter_compare_races_three_columns(tree_loader):
    view = list(compare_tab.compare(tree_loader, Session(), tree_form(temperature=0.0, max_new_tokens=12)))[-1]
    assert view.tree_side and view.spec_title == "### Chain (draft model)"
    assert "Identical output" in view.verdict and "The chain and the tree each reproduced" in view.verdict
    assert "chain **" in view.badge and "tree **" in view.badge
    assert "tokens in all 3 outputs" in view.aligned and "al-col" not in view.aligned
    assert "No text yet" not in view.tree_text and "Tree (draft model)" in view.tree_text
    assert [t.name for t in view.race.data] == ["verifier only", "chain", "tree"]
    assert "nodes drafted per round" in view.tree_stats and "for the chain?**" in view.why
    assert "**The tree against the chain, per round:**" in view.why
    chain = list(compare_tab.compare(tree_loader, Session(), form(temperature=0.0, max_new_tokens=6)))[-1]
    assert not chain.tree_side and chain.spec_title == "### Speculative" and len(chain.race.data) == 2
