"""Typed view records, one per tab, and the pure functions that fill them from traces.

Each record's fields are the components of its tab, by name: the layout builds one component per
field and shows a record by its fields, so a view and its page cannot drift apart. A handler
returns a record, or a :class:`Problem` when a setting is wrong, in which case the page keeps
everything it shows and the message appears at the field concerned.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from html import escape
from typing import Any

import pandas as pd

from specdec.render import (ROW_HEADERS, Segment, cache_text, explain, output_text, position_rows, round_stats,
                            segment_detail, segments)
from specdec.trace import ACCEPTED, BONUS, PLAIN, REJECTED, RESAMPLED, RoundTrace, RunSummary, summarize

from . import charts
from .state import Walkthrough

# What each kind of token is called on the page; the CSS gives each a colour *and* a second cue.
KIND_NAMES = {ACCEPTED: "accepted draft", REJECTED: "rejected draft (not output)", RESAMPLED: "resampled",
              BONUS: "bonus", PLAIN: "verifier only"}


@dataclass(frozen=True)
class Problem:
    """A bad setting or file: the message, in the page's words, and the field it concerns."""

    message: str
    field: str | None = None


@dataclass(frozen=True)
class StepView:
    status: str
    banner: str           # the temperature-0 caveat, or ""
    explain: str
    dist: Any             # plotly Figure, or None (hidden)
    ratio: Any
    table: Any            # pandas Styler / DataFrame of the drafted tokens, or None
    cache: str
    text: str             # HTML: the committed text, colour-coded
    plain: str            # HTML: the same text, plain, whitespace made visible


@dataclass(frozen=True)
class RunView:
    status: str
    text: str
    plain: str
    stats: str
    ratio: Any
    timing: Any
    acceptance: Any
    tokens: Any
    download: str | None  # path of the trace file once the run has ended


@dataclass(frozen=True)
class CompareView:
    badge: str
    base_stats: str
    spec_stats: str
    base_text: str
    spec_text: str
    race: Any


def _whitespace(text: str) -> str:
    """Escaped text whose spaces, tabs and newlines carry markers drawn by CSS (::before), so
    the markers are seen but never copied."""
    out = escape(text)
    out = out.replace(" ", '<span class="sp"> </span>').replace("\t", '<span class="tab">\t</span>')
    return out.replace("\n", '<span class="nl"></span>\n')


def token_html(segs: list[Segment]) -> str:
    """The text as one element per token: its kind as a class (colour plus a second cue: rejected
    drafts are struck through inside ``<del>``), its numbers on hover and keyboard focus, and
    tokens made only of whitespace marked so they can be seen."""
    if not segs:
        return '<div class="spec-tokens spec-empty">No tokens yet.</div>'
    out = []
    for s in segs:
        tag = "del" if s.label == REJECTED else "span"
        detail = escape(segment_detail(s).replace("**", ""), quote=True)
        body = _whitespace(s.text) if not s.text.strip() else escape(s.text)
        out.append(f'<{tag} class="tok tok-{s.label}" tabindex="0" title="{detail}" aria-label="{s.label}: '
                   f'{escape(repr(s.text), quote=True)}">{body}</{tag}>')
    return '<div class="spec-tokens">' + "".join(out) + "</div>"


def plain_html(text: str) -> str:
    if not text:
        return '<pre class="spec-plain spec-empty">No text yet.</pre>'
    return f'<pre class="spec-plain">{_whitespace(text)}</pre>'


def legend_html() -> str:
    items = "".join(f'<span class="tok tok-{k}">{escape(name)}</span> ' for k, name in KIND_NAMES.items())
    return f'<div class="spec-legend" role="note" aria-label="token kinds">Tokens: {items}</div>'


GREEDY_BANNER = ("**Temperature 0: the rule has nothing to decide.** p and q are one-hot (all probability on the "
                 "argmax), so p/q is exactly 1 (same argmax: kept) or 0 (different: rejected) and the draw u does "
                 "not matter (greyed out). Set a temperature such as 0.8 to watch u, p/q and the residual at work.")


def _table(r: RoundTrace, verified: bool, greedy: bool):
    df = pd.DataFrame(position_rows(r, verified), columns=ROW_HEADERS[:7 if verified else 3])
    if verified and greedy:  # u is drawn but irrelevant at T = 0: grey it out
        return df.style.set_properties(subset=["u"], **{"color": "#6b7280", "font-style": "italic"})
    return df


def step_view(walk: Walkthrough, drafter: str, greedy: bool, notice: str) -> StepView:
    """The round on show, revealed up to its phase, and the text committed so far."""
    rounds = list(walk.rounds)
    text, plain = token_html(segments(rounds)), plain_html(output_text(segments(rounds)))
    r = walk.shown
    banner = GREEDY_BANNER if greedy and drafter != "none" else ""
    if r is None:
        return StepView(notice, banner, "", None, None, None, "", text, plain)
    phases = {"draft": ("draft",), "verify": ("draft", "verify"), "commit": ("draft", "verify", "commit")}[walk.phase]
    verified = "verify" in phases
    where = {"draft": "drafted, not yet verified", "verify": "verified, not yet committed",
             "commit": "drafted, verified and committed"}[walk.phase]
    revealed = ("" if walk.phase == "commit" else " The engine computed this whole round when it was drafted; "
                "this tab reveals it phase by phase, so the next step answers at once.")
    return StepView(
        status=f"{notice}Round {r.index + 1}: {where}.{revealed}", banner=banner,
        explain="\n\n".join(explain(r, ph, drafter, greedy) for ph in phases),
        dist=charts.distribution_figure(r) if verified else None,
        ratio=charts.ratio_figure([r]) if verified and r.positions else None,
        table=_table(r, verified, greedy) if r.positions else None,
        cache=cache_text(r) if verified else "", text=text, plain=plain)


def run_view(rounds: list[RoundTrace], prefill_s: float, status: str, download: str | None = None,
             waited_s: float = 0.0) -> RunView:
    segs = segments(rounds)
    some = bool(rounds)
    return RunView(status=status, text=token_html(segs), plain=plain_html(output_text(segs)),
                   stats=summary_markdown(summarize(rounds, prefill_s), rounds, waited_s) if some else "",
                   ratio=charts.ratio_figure(rounds) if any(r.positions for r in rounds) else None,
                   timing=charts.timing_figure(rounds) if some else None,
                   acceptance=charts.acceptance_figure(rounds) if any(r.positions for r in rounds) else None,
                   tokens=charts.tokens_per_round_figure(rounds) if any(r.positions for r in rounds) else None,
                   download=download)


def summary_markdown(s: RunSummary, rounds: list[RoundTrace], waited_s: float = 0.0) -> str:
    """Every number with its definition, where it is shown."""
    lines = [f"**{s.tokens_per_s:.2f} tok/s** = {s.new_tokens} tokens / {s.wall_s:.2f} s of this session's compute "
             f"(prefill {s.prefill_s:.2f} s included"
             + (f"; {waited_s:.1f} s waiting for other sessions' rounds excluded)" if waited_s >= 0.05 else ")"),
             f"**{s.rounds} rounds**, **{s.target_forwards} verifier passes** = one per round + one over the prompt "
             "(the prefill)"]
    if s.drafted:
        stats = round_stats(rounds)
        tested = sum(r.n_accepted + (r.rejected_at is not None) for r in rounds)
        lines += [f"**acceptance {s.acceptance_rate:.0%}** = drafts kept / drafted = {s.accepted} / {s.drafted}",
                  f"**a = {stats.running_a[-1]:.2f}** = drafts kept / tested = {s.accepted} / {tested} (a draft after "
                  "a rejection is never tested; this is the a of the theory curve)",
                  f"**{s.mean_tokens_per_round:.2f} tokens per round** = {s.new_tokens} tokens / {s.rounds} rounds "
                  "(kept drafts, plus the resampled or bonus token)"]
    return "\n".join(f"* {line}" for line in lines)


def field_message(problem: Problem, labels: dict[str, str], value=None) -> str:
    """A ConfigError message in the words on the screen: the field's label instead of its code
    name, and "is empty" instead of "(got None)"."""
    msg = problem.message
    field = problem.field
    if field in labels and msg.startswith(field):
        rest = msg[len(field):]
        if value is None and re.search(r"\(got None\)$", rest):
            allowed = re.sub(r"^ must be | \(got None\)$", "", rest)
            return f"{labels[field]} is empty: enter {allowed}."
        return labels[field] + rest + "."
    return msg
