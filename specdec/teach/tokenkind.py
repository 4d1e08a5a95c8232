"""Each drafted token classed by what it is, and the acceptance a = kept / tested per class: the
question every learner asks after a first run, why code drafts well and prose does not.

A token is classed from its decoded text and the generated text before it (``before``), never
from the token id, so a trace file classes the same on any machine. The classes (:data:`KINDS`):

* **whitespace and indentation**: only spaces, tabs and line breaks ("\\n    ", "  ").
* **numbers**: "3", " 42", "3.14", "1e-5", "0xff"; a digit glued to a number's digits before it
  ("4" after "3.1"). A digit glued to a name ("1" after "x") belongs to the name.
* **punctuation and operators**: every character punctuation or a symbol (Unicode P*, Sm, Sc, Sk):
  ":", " ==", "->", "):", "```".
* **language keywords**, **identifiers**, **words of prose**: a token holding one run of letters,
  digits and "_" (its *word*), with at most punctuation around it (" return", ".append", "(self").
  A token glued to the letters before it ("ged" after " mer") is part of that word: the word is
  read whole. Then, in order:
  an identifier wherever it is (prose included) when its spelling says so: a "_", a digit, or
  camelCase ("merge_lists", "list2", "mergeLists"); in code, a Python keyword (``keyword.kwlist``:
  "def", "return", "if", "True") is a keyword and any other word an identifier; in prose, a word.
  Soft keywords ("match", "case", "type", "_") are left out: in generated code they are names far
  more often than statements.
* **other**: the rest: an empty text (a token that ends inside a character), a special token such
  as "<|im_end|>", an emoji, a mix such as "a.b" or "x+y".

*Code* is decided from the text before the token and the token itself, cheaply and in this order:
inside a ``` fence (an odd number of fences before it), a comment after "#" or a string on the same
line, or a docstring (an odd number of \"\"\" in the fence) is prose, the rest of the fence is code;
outside fences, inline `code` (an odd number of backticks on the line) is code, and so is a line
indented by four spaces or a tab, a line that starts with a Python statement keyword in lower case
("def", "return", "for", ...), or a line with an operator ("==", "->", " = ", "+=") or a name called
or indexed ("merge(", "a[").
"""
from __future__ import annotations

import keyword
import math
import re
import unicodedata
from dataclasses import dataclass

from specdec.trace import ACCEPTED, DraftPosition, RoundTrace

WHITESPACE, PUNCTUATION, KEYWORD, IDENTIFIER, NUMBER, WORD, OTHER = (
    "whitespace", "punctuation", "keyword", "identifier", "number", "word", "other")
KINDS = (WHITESPACE, PUNCTUATION, KEYWORD, IDENTIFIER, NUMBER, WORD, OTHER)
KIND_NAMES = {WHITESPACE: "whitespace and indentation", PUNCTUATION: "punctuation and operators",
              KEYWORD: "language keywords", IDENTIFIER: "identifiers", NUMBER: "numbers", WORD: "words of prose",
              OTHER: "other tokens"}
KEYWORDS = frozenset(keyword.kwlist)
MIN_TESTED = 10  # a class with fewer tested drafts is too few to compare (its rate moves by 10 points per draft)

_NUMBER = re.compile(r"[+-]?(?:0[xXbBoO][0-9a-fA-F_]+|(?:\d[\d_]*\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)")
_WORDY = re.compile(r"([^\w\s]*)(\w+)([^\w\s]*)")
_CAMEL = re.compile(r"[a-z][A-Z]|[A-Z]{2}[a-z]")
_STATEMENT = re.compile(r"\s*(?:def|class|import|from|return|if|elif|else|for|while|try|except|finally|with|raise|"
                        r"assert|pass|break|continue|yield|lambda|async|await|global|nonlocal|del)\b")
_CODE_LINE = re.compile(r"^(?: {4}|\t)|==|!=|<=|>=|->|[+\-*/%]=|:=| = |\w[(\[]")


def _trailing_word(before: str) -> str:
    """The letters, digits and "_" that end ``before`` (read backwards: a regex search would try every start)."""
    i = len(before)
    while i and (before[i - 1].isalnum() or before[i - 1] == "_"):
        i -= 1
    return before[i:]


def _symbolic(text: str) -> bool:
    return all(unicodedata.category(c)[0] == "P" or unicodedata.category(c) in ("Sm", "Sc", "Sk") for c in text)


def in_code(before: str, text: str = "") -> bool:
    """Whether a token ``text`` after ``before`` reads as code (the rules of the module docstring)."""
    line = before[before.rfind("\n") + 1:]
    fences = before.count("```")
    if fences % 2:  # inside a fence: code, except its comments, strings and docstrings
        fence = before[before.rfind("```"):]
        return not (fence.count('"""') % 2 or "#" in line or line.count('"') % 2 or line.count("'") % 2)
    here = line + text
    return bool(here.replace("```", "").count("`") % 2 or _STATEMENT.match(here) or _CODE_LINE.search(here))


def token_kind(text: str, before: str = "") -> str:
    """The class of a token with decoded text ``text`` that follows the generated text ``before``."""
    stripped = text.strip()
    if not stripped:
        return WHITESPACE if text else OTHER
    if stripped.startswith("<|") and stripped.endswith("|>"):  # a chat template's markup: no text of the answer
        return OTHER
    m = _WORDY.fullmatch(stripped)
    wordy = m is not None and _symbolic(m.group(1)) and _symbolic(m.group(3))
    glued = _trailing_word(before) if text[0] == stripped[0] else ""  # no space between it and a word before
    if wordy and glued and not m.group(1):  # the rest of the word before it: read the word whole
        word = glued + m.group(2)
        return NUMBER if word.isdigit() else _word_kind(word, before, text)
    if _NUMBER.fullmatch(stripped):
        return NUMBER
    if _symbolic(stripped):
        return PUNCTUATION
    if not wordy:
        return OTHER
    return NUMBER if m.group(2).isdigit() else _word_kind(m.group(2), before, text)


def _word_kind(word: str, before: str, text: str) -> str:
    if "_" in word or any(c.isdigit() for c in word) or _CAMEL.search(word):
        return IDENTIFIER
    if not in_code(before, text):
        return WORD
    return KEYWORD if word in KEYWORDS else IDENTIFIER


def drafted_kinds(rounds: list[RoundTrace]) -> list[tuple[DraftPosition, str]]:
    """Every drafted position of one run with its class; a position follows the text emitted before
    its round and the drafts before it in the round (all kept, where it was tested)."""
    before, out = "", []
    for r in rounds:
        here = before
        for pos in r.positions:
            out.append((pos, token_kind(pos.text, here)))
            here += pos.text
        before += "".join(r.pieces)
    return out


@dataclass(frozen=True)
class KindCount:
    """Drafts of one class kept and tested (as :attr:`DraftPosition.tested`: a draft after a rejection
    is never tested), over one run or several."""

    kind: str
    kept: int
    tested: int

    @property
    def rate(self) -> float | None:
        """a for this class, kept / tested; None when none was tested."""
        return self.kept / self.tested if self.tested else None


def acceptance_by_kind(*runs: list[RoundTrace]) -> tuple[KindCount, ...]:
    """Kept and tested drafts per class (in :data:`KINDS` order) over the rounds of each run given:
    the per-class terms of a = kept / tested (:func:`specdec.teach.theory.acceptance`), which add up to it."""
    kept, tested = dict.fromkeys(KINDS, 0), dict.fromkeys(KINDS, 0)
    for rounds in runs:
        for pos, kind in drafted_kinds(list(rounds)):
            if pos.tested:
                tested[kind] += 1
                kept[kind] += pos.status == ACCEPTED
    return tuple(KindCount(k, kept[k], tested[k]) for k in KINDS)


def _share(c: KindCount) -> str:
    return f"{c.rate:.0%} of the time ({c.kept} of {c.tested})"


def sampling_gap(a: KindCount, b: KindCount) -> float:
    """The gap between two rates (tested drafts > 0 each) that sampling alone often gives: two standard errors
    of the difference of two binomial proportions, each rate taken as (kept + 1) / (tested + 2) so that
    12 of 12 does not claim no spread at all."""
    def var(c: KindCount) -> float:
        r = (c.kept + 1) / (c.tested + 2)
        return r * (1 - r) / c.tested
    return 2 * math.sqrt(var(a) + var(b))


def kinds_sentence(counts: tuple[KindCount, ...], least: int = MIN_TESTED) -> str:
    """What the counts show, in a sentence or two: the classes kept most and least often among those
    with at least ``least`` tested drafts, and whether their difference is more than sampling noise."""
    enough = sorted((c for c in counts if c.tested >= least), key=lambda c: c.rate, reverse=True)
    few = [KIND_NAMES[c.kind] for c in counts if 0 < c.tested < least]
    small = f" Too few to say anything ({', '.join(few)}: under {least} tested each)." if few else ""
    if not enough:
        most = max((c.tested for c in counts), default=0)
        return (f"Too few drafts were tested to compare kinds of token (at most {most} in one kind, {least} needed): "
                "run more tokens, or several runs in the Compare tab.")
    if len(enough) == 1:
        c = enough[0]
        return f"Only {KIND_NAMES[c.kind]} had {least} or more tested drafts: kept {_share(c)}.{small}"
    hi, lo = enough[0], enough[-1]
    head = (f"{KIND_NAMES[hi.kind].capitalize()} were kept most often, {_share(hi)}; {KIND_NAMES[lo.kind]} least, "
            f"{_share(lo)}.")
    noise = sampling_gap(hi, lo)
    if hi.rate - lo.rate <= noise:
        head += (f" The gap ({100 * (hi.rate - lo.rate):.0f} points) is within sampling noise for counts this small "
                 f"(about {100 * noise:.0f} points): no kind drafts clearly better here.")
    return head + small
