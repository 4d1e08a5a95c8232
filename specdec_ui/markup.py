"""The HTML the tabs share: text whose whitespace carries visible marks, the text colour-coded token by
token, the same text plain, and the legend of the kinds of token.

Every piece of text that reaches the page is escaped here or by the function that builds it
(:func:`html.escape`); the marks and the colours are CSS (``style.css``), so nothing is sent twice.
"""
from __future__ import annotations

from html import escape

from specdec.teach.render import Segment, segment_detail
from specdec.trace import ACCEPTED, BONUS, PLAIN, REJECTED, RESAMPLED

# What each kind of token is called in the legend; the CSS gives each a colour *and* a second cue.
LEGEND = {ACCEPTED: "accepted draft", REJECTED: "rejected draft (not output)", RESAMPLED: "resampled",
          BONUS: "bonus", PLAIN: "verifier only"}
NO_TOKENS = '<div class="spec-tokens spec-empty">No tokens yet.</div>'


def whitespace_html(text: str, keep: bool = True) -> str:
    """Escaped text whose spaces, tabs and newlines carry markers drawn by CSS (::before), seen only
    when the page's "show whitespace" box is ticked and never copied. ``keep`` False drops the
    whitespace itself and keeps only its markers, always seen: a rejected draft shown inline then
    adds no line break or indentation to the text."""
    out = escape(text)
    sp, tab, nl = (" ", "\t", "\n") if keep else ("", "", "")
    out = out.replace(" ", f'<span class="sp">{sp}</span>').replace("\t", f'<span class="tab">{tab}</span>')
    return out.replace("\n", f'<span class="nl"></span>{nl}')


def token_html(segs: list[Segment], detail: bool = True) -> str:
    """The text as one element per token: its kind as a class (colour plus a second cue), its
    story in ``aria-label``, which screen readers read and which CSS draws as a box on hover and
    on keyboard focus (one copy of the numbers per token keeps a long run's page light). A
    rejected draft is a ``<del>`` at the boundary where it was replaced, holding its text with
    whitespace as markers only: by default CSS hides the text and draws a thin mark that takes no
    width, so the kept text reads as text; the page's "rejected drafts" switch shows it inline,
    struck through. Either way the kept text keeps its exact layout. ``detail`` False leaves out
    the stories (a run in progress: a quarter of the bytes to send and lay out each second; the
    final view has them)."""
    if not segs:
        return NO_TOKENS
    out = []
    for s in segs:
        common = (f'class="tok tok-{s.label}" tabindex="0" aria-label="{escape(segment_detail(s), quote=True)}"'
                  if detail else f'class="tok tok-{s.label}"')
        if s.label == REJECTED:
            out.append(f'<del {common}><span class="rej-text">{whitespace_html(s.text, keep=False)}</span></del>')
            continue
        # every space can carry its marker (drawn on request): the final view's; the live one marks
        # only whitespace-only tokens, a lighter page to send and lay out each second
        body = whitespace_html(s.text) if detail or not s.text.strip() else escape(s.text)
        out.append(f"<span {common}>{body}</span>")
    return '<div class="spec-tokens">' + "".join(out) + "</div>"


def plain_html(text: str) -> str:
    """The text as it is, in a box to read and copy, its whitespace marked on request."""
    if not text:
        return '<pre class="spec-plain spec-empty">No text yet.</pre>'
    return f'<pre class="spec-plain">{whitespace_html(text)}</pre>'


def legend_html() -> str:
    """One chip per kind of token, in the colours and cues of the text."""
    items = "".join(f'<span class="tok tok-{k}">{escape(name)}</span> ' for k, name in LEGEND.items())
    return f'<div class="spec-legend" role="note" aria-label="token kinds">Tokens: {items}</div>'
