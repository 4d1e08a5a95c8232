"""Typed view records, one per tab, and the pure functions that fill them from traces.

Each record's fields are the components of its tab, by name: the layout builds one component per
field and shows a record by its fields, so a view and its page cannot drift apart. A handler
returns a record, or a :class:`Problem` when the settings are wrong, in which case the page keeps
everything it shows and only the message changes.
"""
from __future__ import annotations

from dataclasses import dataclass
from html import escape
from typing import Any

import pandas as pd

from specdec.render import (ROW_HEADERS, Segment, cache_text, explain, position_rows, round_stats, segment_detail,
                            segments, summary_text)
from specdec.trace import ACCEPTED, BONUS, PLAIN, REJECTED, RESAMPLED, RoundTrace, summarize

from . import charts
from .state import Walkthrough

# What each kind of token is called on the page; the CSS gives each a colour *and* a second cue.
KIND_NAMES = {ACCEPTED: "accepted draft", REJECTED: "rejected draft (not output)", RESAMPLED: "resampled",
              BONUS: "bonus", PLAIN: "verifier only"}


@dataclass(frozen=True)
class Problem:
    """A bad setting: the message names the field; nothing else on the page changes."""

    message: str
    field: str | None = None


@dataclass(frozen=True)
class StepView:
    text: str             # HTML: the committed text, colour-coded
    status: str
    explain: str
    table: Any            # pandas.DataFrame of the drafted tokens, or None
    cache: str
    ratio: Any            # plotly Figure, or None
    dist: Any


@dataclass(frozen=True)
class RunView:
    text: str
    stats: str
    status: str
    ratio: Any
    timing: Any
    acceptance: Any
    tokens: Any
    download: str | None  # path of the trace file once the run has ended


@dataclass(frozen=True)
class CompareView:
    base_text: str
    spec_text: str
    base_stats: str
    spec_stats: str
    badge: str
    race: Any


def token_html(segs: list[Segment]) -> str:
    """The text as one element per token: its kind as a class (colour plus a second cue: rejected
    drafts are struck through inside ``<del>``), its numbers on hover and on keyboard focus."""
    if not segs:
        return '<div class="spec-tokens spec-empty">No tokens yet.</div>'
    out = []
    for s in segs:
        tag = "del" if s.label == REJECTED else "span"
        detail = escape(segment_detail(s).replace("**", ""), quote=True)
        out.append(f'<{tag} class="tok tok-{s.label}" tabindex="0" title="{detail}" data-kind="{s.label}">'
                   f'{escape(s.text)}</{tag}>')
    return '<div class="spec-tokens">' + "".join(out) + "</div>"


def legend_html() -> str:
    items = "".join(f'<span class="tok tok-{k}">{escape(name)}</span> ' for k, name in KIND_NAMES.items())
    return f'<div class="spec-legend" aria-label="token kinds">{items}</div>'


def step_view(walk: Walkthrough, drafter: str, greedy: bool, notice: str) -> StepView:
    """The round on show, revealed up to its phase, and the text committed so far."""
    text = token_html(segments(list(walk.rounds)))
    r = walk.shown
    if r is None:
        return StepView(text, notice, "", None, "", None, None)
    phases = {"draft": ("draft",), "verify": ("draft", "verify"), "commit": ("draft", "verify", "commit")}[walk.phase]
    verified = "verify" in phases
    where = {"draft": "drafted, not yet verified", "verify": "verified, not yet committed",
             "commit": "drafted, verified and committed"}[walk.phase]
    return StepView(
        text=text, status=f"{notice}Round {r.index + 1}: {where}.",
        explain="\n\n".join(explain(r, ph, drafter, greedy) for ph in phases),
        table=pd.DataFrame(position_rows(r, verified), columns=ROW_HEADERS[:7 if verified else 3]),
        cache=cache_text(r) if verified else "",
        ratio=charts.ratio_figure([r]) if verified and r.positions else None,
        dist=charts.distribution_figure(r) if verified else None)


def run_view(rounds: list[RoundTrace], prefill_s: float, status: str, download: str | None = None) -> RunView:
    stats = round_stats(rounds)
    a = stats.running_a[-1] if stats.running_a and any(stats.drafted) else None
    return RunView(text=token_html(segments(rounds)), stats=summary_text(summarize(rounds, prefill_s), a),
                   status=status, ratio=charts.ratio_figure(rounds), timing=charts.timing_figure(rounds),
                   acceptance=charts.acceptance_figure(rounds), tokens=charts.tokens_per_round_figure(rounds),
                   download=download)
