"""The token classifier, a test per class on real token texts (leading spaces, indentation,
operators, numbers, a keyword against the same word in prose), and the per-class counts of a run,
which add up to the run's drafts tested and kept."""
from __future__ import annotations

import re

import pytest
from helpers import tiny
from helpers.scripted import ScriptedDrafter, hf_greedy

from specdec import DecodeConfig, Generation, SamplingConfig, make_drafter
from specdec.decode.start import start
from specdec.teach.render import segment_detail, segments
from specdec.teach.theory import acceptance
from specdec.teach.tokenkind import (
    IDENTIFIER,
    KEYWORD,
    KIND_NAMES,
    KINDS,
    NUMBER,
    OTHER,
    PUNCTUATION,
    WHITESPACE,
    WORD,
    KindCount,
    acceptance_by_kind,
    drafted_kinds,
    in_code,
    kinds_sentence,
    token_kind,
)
from specdec.trace import (
    ACCEPTED,
    BONUS,
    REJECTED,
    RESAMPLED,
    UNREACHED,
    DraftPosition,
    PhaseTimes,
    RoundTrace,
    TokenProb,
)

CODE = "Here is the function:\n\n```python\ndef merge(a, b):\n"   # inside a fence, an indented body next
PROSE = "Speculative decoding drafts a few tokens"


@pytest.mark.parametrize("text, before", [(" ", PROSE), ("\n", CODE), ("\n    ", CODE), ("\t", CODE), ("  ", "x")])
def test_whitespace_and_indentation(text, before):
    assert token_kind(text, before) == WHITESPACE


@pytest.mark.parametrize("text, before", [(":", CODE + "    if a"), (" ==", CODE + "    if a"), (" ->", CODE[:-2]),
                                          ("):\n", CODE), (",", PROSE), (".", PROSE), ("```", CODE), (" +=", CODE),
                                          ("—", PROSE), (" (", PROSE)])
def test_punctuation_and_operators(text, before):
    assert token_kind(text, before) == PUNCTUATION


@pytest.mark.parametrize("text, before", [(" return", CODE + "   "), ("if", CODE + "    "), (" in", CODE + "    for x"),
                                          ("def", "```python\n"), (" None", CODE + "    x ="), ("True", CODE),
                                          ("ret", CODE + "    ")])  # glued to "urn" later, still "ret..." here
def test_language_keywords_in_code(text, before):
    expected = KEYWORD if text != "ret" else IDENTIFIER  # a piece of a word is read whole: "ret" is no keyword yet
    assert token_kind(text, before) == expected


def test_a_keyword_in_prose_is_a_word_and_a_piece_of_a_keyword_is_read_whole():
    assert token_kind(" if", PROSE + " and keeps them") == WORD                # prose: "if" is a word
    assert token_kind(" if", CODE + "    x = 1\n   ") == KEYWORD              # code: the same text, a keyword
    assert token_kind(" return", "The verifier may") == WORD
    assert token_kind("urn", CODE + "    ret") == KEYWORD                     # "ret" + "urn" = "return"
    assert token_kind(" for", "Thanks") == WORD and token_kind("for", "\n") == KEYWORD  # a line that starts with it


@pytest.mark.parametrize("text, before", [(" merge", CODE[:-len("merge(a, b):\n")]), (" result", CODE + "    "),
                                          (".append", CODE + "    result"), ("_sorted", CODE + "    merge"),
                                          (" merge_lists", PROSE + " with"), (" mergeLists", "Call"),
                                          ("1", CODE + "    list"), ("(self", CODE + "    super().__init__"),
                                          (" print", "Use `"), (" len", "    n =")])
def test_identifiers(text, before):
    assert token_kind(text, before) == IDENTIFIER


@pytest.mark.parametrize("text, before", [("3", CODE + "    x = "), (" 42", PROSE + ":"), ("3.14", CODE + "    pi = "),
                                          ("1e-5", CODE), ("0xff", CODE), ("4", "pi is 3.1"), ("1", "pi is 3.")])
def test_numbers(text, before):
    assert token_kind(text, before) == NUMBER


@pytest.mark.parametrize("text, before", [(" tokens", PROSE + " and"), ("The", ""), (" sky", "Why is the"),
                                          ("ged", "The lists are mer"), (" sorted", CODE + "    # both lists are"),
                                          (" two", '```python\ndef f():\n    """Merge'), ("'s", "The verifier"),
                                          (" Ergebnis", "Das")])
def test_words_of_prose_including_comments_and_docstrings_in_code(text, before):
    assert token_kind(text, before) == WORD


@pytest.mark.parametrize("text", ["", "🙂", "a.b", "x+y", "\ufffd", "\x00", "\ud800", "<|im_end|>"])
def test_other(text):
    assert token_kind(text, PROSE) == OTHER
    assert token_kind(text, CODE + "    x" + text * 3) in KINDS            # any text after any text: a class


def test_code_context():
    assert in_code(CODE) and not in_code(PROSE)
    assert not in_code(CODE + "    return a\n```\n\nThis")                  # after the fence closed
    assert in_code("Call `merge", "_lists") and not in_code("Call `merge` on")  # inline code, then out of it
    assert in_code("", "    x") and in_code("y", " = 2") and in_code("f", "(x)")


# ---- counts of a run --------------------------------------------------------------------------

def _pos(text: str, status: str) -> DraftPosition:
    tested = status in (ACCEPTED, REJECTED)
    return DraftPosition(0, text, 0.5, 0.5, 1.0 if tested else None, 0.5 if tested else None, 0.5, status, ())


def _round(index: int, drafts: list[tuple[str, str]], next_text: str) -> RoundTrace:
    """A chain round from (text, status) drafts; the next token is resampled after a rejection, else a bonus."""
    positions = tuple(_pos(t, s) for t, s in drafts)
    kept = [t for t, s in drafts if s == ACCEPTED]
    rejected = next((i for i, (_, s) in enumerate(drafts) if s == REJECTED), None)
    return RoundTrace(index, 10, positions, len(kept), rejected, RESAMPLED if rejected is not None else BONUS,
                      TokenProb(0, next_text, 1.0), (), tuple(range(len(kept) + 1)), (*kept, next_text), (0, 0), None,
                      PhaseTimes(), 0.0)


SCRIPTED = [  # a prose line, then code in a fence: counts known by hand
    _round(0, [("Here", ACCEPTED), (" is", ACCEPTED), (" a", REJECTED), (" one", UNREACHED)], " the"),
    _round(1, [(" function", ACCEPTED), (":", ACCEPTED), ("\n\n", ACCEPTED), ("```", ACCEPTED)], "python"),
    _round(2, [("\n", ACCEPTED), ("def", ACCEPTED), (" merge", REJECTED), ("(a", UNREACHED)], " merge"),
    _round(3, [("_lists", ACCEPTED), ("(a", ACCEPTED), (",", ACCEPTED), (" b", ACCEPTED)], "):\n"),
    _round(4, [("    ", ACCEPTED), ("if", REJECTED), (" not", UNREACHED)], "    return"),
]


def test_per_class_counts_of_a_scripted_run_are_known_by_hand_and_add_up():
    counts = {c.kind: (c.kept, c.tested) for c in acceptance_by_kind(SCRIPTED)}
    assert counts == {WHITESPACE: (3, 3), PUNCTUATION: (3, 3), KEYWORD: (1, 2), IDENTIFIER: (3, 4), NUMBER: (0, 0),
                      WORD: (3, 4), OTHER: (0, 0)}
    # "if" after "    " in round 4 follows the emitted text "...):\n" plus the kept indentation: a keyword
    kinds = [k for pos, k in drafted_kinds(SCRIPTED) if pos.text == "if"]
    assert kinds == [KEYWORD]
    assert sum(t for _, t in counts.values()) == sum(r.tested for r in SCRIPTED) == 16
    assert sum(k for k, _ in counts.values()) == sum(r.n_accepted for r in SCRIPTED) == 13
    both = acceptance_by_kind(SCRIPTED, SCRIPTED)                         # over several runs: each counted
    assert [(c.kept, c.tested) for c in both] == [(2 * c.kept, 2 * c.tested) for c in acceptance_by_kind(SCRIPTED)]


@pytest.mark.parametrize("drafter, temperature", [("scripted", 0.0), ("model", 1.0), ("tree", 1.0)])
def test_per_class_counts_of_a_tiny_model_run_add_up_to_its_drafts_tested_and_kept(drafter, temperature):
    target = tiny.model(7, scale=8)
    draft = tiny.noisy_copy(target, 1, 0.5)
    pair = tiny.pair(target if drafter != "tree" else tiny.lean(target), None if drafter == "scripted" else
                     draft if drafter == "model" else tiny.lean(draft))
    pair.stop_ids = frozenset()
    prompt = tiny.prompt_ids(seed=7)
    cfg = DecodeConfig(max_new_tokens=40, k=4, confidence=0.0, seed=3, sampling=SamplingConfig(temperature),
                       tree_width=2, tree_nodes=6)
    if drafter == "scripted":
        truth = hf_greedy(target, prompt, eos=None)
        gen = Generation(pair, prompt, cfg, ScriptedDrafter(truth, {2, 5, 9}, len(prompt), pair.vocab_size)).run()
    else:
        gen = Generation(pair, prompt, cfg, make_drafter(drafter, pair, tree=(2, 6))).run()
    counts = acceptance_by_kind(gen.rounds)
    kept, tested = sum(c.kept for c in counts), sum(c.tested for c in counts)
    assert tested == sum(r.tested for r in gen.rounds) > 0
    assert kept == sum(r.n_accepted for r in gen.rounds) > 0
    assert kept / tested == pytest.approx(acceptance(gen.rounds))
    assert tested < sum(r.drafted for r in gen.rounds) or drafter == "tree"  # the untested drafts are left out


def test_the_hover_of_a_token_names_its_class():
    segs = segments(SCRIPTED)
    kinds = {s.text: s.kind for s in segs}
    assert kinds["def"] == KEYWORD and kinds["_lists"] == IDENTIFIER and kinds[" is"] == WORD
    assert all(KIND_NAMES[s.kind] in segment_detail(s) for s in segs)
    rejected = next(s for s in segs if s.label == REJECTED and s.text == " merge")
    assert rejected.kind == IDENTIFIER                                   # classed where it was drafted


def test_the_sentence_names_the_highest_and_lowest_classes_with_enough_samples_or_says_too_few():
    counts = (KindCount(WHITESPACE, 112, 120), KindCount(PUNCTUATION, 30, 40), KindCount(WORD, 35, 60),
              KindCount(NUMBER, 2, 3), KindCount(OTHER, 0, 0))
    said = kinds_sentence(counts)
    assert said.startswith("Whitespace and indentation were kept most often, 93% of the time (112 of 120); "
                           "words of prose least, 58% of the time (35 of 60).")
    assert "numbers: under 10 tested" in said and "other" not in said and "noise" not in said
    close = kinds_sentence((KindCount(KEYWORD, 9, 10), KindCount(WORD, 8, 10)))
    assert "within sampling noise" in close                              # 90% against 80% of 10 each
    # 10 of 10 is no proof of a rate of 1: against 7 of 10 that is still noise (Fisher's exact test: p = 0.21)
    assert "within sampling noise" in kinds_sentence((KindCount(KEYWORD, 10, 10), KindCount(WORD, 7, 10)))
    assert "noise" not in kinds_sentence((KindCount(KEYWORD, 12, 12), KindCount(WORD, 63, 78)))
    assert kinds_sentence((KindCount(WORD, 3, 4),)).startswith("Too few drafts were tested")
    assert kinds_sentence(()).startswith("Too few") and kinds_sentence((KindCount(WORD, 5, 10),)).startswith("Only")
    assert KindCount(WORD, 0, 0).rate is None and set(KIND_NAMES) == set(KINDS)


# ---- the Run and Compare tabs -----------------------------------------------------------------

def test_the_run_view_draws_kept_over_tested_per_kind_with_its_counts_and_says_what_they_show():
    from specdec_ui.tabs.run import run_view
    view = run_view(SCRIPTED, 0.0, "Finished.")
    rows = list(view.kinds.data[0].y)
    assert rows[:5] == ["whitespace<br>3/3", "punctuation, operators<br>3/3", "keywords<br>1/2", "identifiers<br>3/4",
                        "numbers<br>none tested"]
    assert list(view.kinds.data[0].x)[:4] == [1.0, 1.0, 0.5, 0.75]
    assert view.kinds_text.startswith("Too few drafts were tested")           # 4 at most in one kind
    assert "kept / tested: drafts kept over drafts the rule tested" in view.kinds_text
    assert ", ".join(KIND_NAMES.values()) in view.kinds_text and "bonus" not in view.kinds_text  # these kinds
    live = run_view(SCRIPTED, 0.0, "Round 5...", final=False)                 # drawn once, at the end
    assert live.kinds == live.kinds_text == "unchanged"
    assert run_view(SCRIPTED[:0], 0.0, "Finished.").kinds is None             # nothing drafted: no empty chart


def _shown(fig) -> list[tuple[int, int]]:
    """(kept, tested) per row of a per-kind chart, read from its row labels."""
    return [tuple(map(int, m.groups())) if m else (0, 0)
            for m in (re.search(r"<br>(\d+)/(\d+)", row) for row in fig.data[0].y)]


def _compared(temperature: float, seeds: tuple[int, ...]):
    """A finished comparison on tiny models: its view and the speculative side's runs."""
    from dataclasses import replace

    from specdec_ui.charts import SPECULATIVE, VERIFIER_ONLY
    from specdec_ui.state import form_defaults, parse_form
    from specdec_ui.tabs.compare import compare_view
    target = tiny.model(1, scale=4)
    pair = tiny.pair(target, tiny.noisy_copy(target, 2, 0.3))
    settings = parse_form({**form_defaults(), "prompt": "w1 w2 w3", "k": 3, "confidence": 0.0,
                           "temperature": temperature, "max_new_tokens": 16}, pair)
    pairs = [{name: start(pair, settings.prompt, replace(settings.decode, seed=seed), drafter).run()
              for name, drafter in ((VERIFIER_ONLY, "none"), (SPECULATIVE, "model"))} for seed in seeds]
    return compare_view(pairs, settings, finished=True, final=True), [p[SPECULATIVE].rounds for p in pairs], \
        lambda: compare_view(pairs, settings, finished=False)


def test_compare_draws_the_chart_over_every_speculative_run():
    view, runs, running = _compared(1.0, (0, 1))
    assert len(view.kinds.data) == 1                                          # the one speculative side
    assert _shown(view.kinds) == [(c.kept, c.tested) for c in acceptance_by_kind(*runs)]
    assert sum(t for _, t in _shown(view.kinds)) == sum(r.tested for run in runs for r in run) > 0
    assert "kept / tested" in view.kinds_text
    assert running().kinds == "unchanged"                                   # while it runs


def test_compare_at_temperature_zero_counts_identical_runs_once():
    view, runs, _ = _compared(0.0, (0, 1, 2))
    assert _shown(view.kinds) == [(c.kept, c.tested) for c in acceptance_by_kind(runs[0])]  # greedy: three copies, once
    assert "Over 1 distinct run(s): 2 run(s)" in view.kinds_text
