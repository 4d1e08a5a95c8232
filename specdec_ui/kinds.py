"""Drafts kept by kind of token (whitespace, punctuation, keywords, ...): the chart and the words under it,
for the Run tab's run and the Compare tab's speculative runs (:mod:`specdec.teach.tokenkind`)."""
from __future__ import annotations

from specdec.teach import tokenkind
from specdec.teach.tokenkind import acceptance_by_kind, kinds_sentence
from specdec.trace import RoundTrace
from specdec_ui import charts

KINDS_DEFINED = ("*kept / tested: drafts kept over drafts the rule tested (a draft after a rejection is never "
                 f"tested), per kind of drafted token: {', '.join(tokenkind.KIND_NAMES.values())}. Each token is "
                 "classed by its text and the text before it: a word inside a code fence, inline code or a line of "
                 "code is a keyword or an identifier, elsewhere (comments and docstrings included) a word of prose (the rules: "
                 "docs/notation.md). The same kind is often kept more in one text than another: what the text is "
                 "about matters as much as the kind of token. Faint bars rest on fewer than "
                 f"{tokenkind.MIN_TESTED} tested drafts.*")


def kinds_chart(sides: dict[str, list[list[RoundTrace]]]):
    """The per-kind chart over each side's runs; None when no draft was tested."""
    counts = {name: acceptance_by_kind(*runs) for name, runs in sides.items()}
    return charts.kinds_figure(counts) if any(c.tested for side in counts.values() for c in side) else None


def kinds_markdown(sides: dict[str, list[list[RoundTrace]]]) -> str:
    """What the per-kind chart shows, a sentence per side, and what its numbers mean."""
    said = [(f"**{name.capitalize()}:** " if len(sides) > 1 else "") + kinds_sentence(acceptance_by_kind(*runs))
            for name, runs in sides.items()]
    return "\n\n".join(said + [KINDS_DEFINED])
