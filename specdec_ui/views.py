"""Typed view records, one per tab, and the pure functions that fill them from traces.

Each record's fields are the components of its tab, by name: the layout builds one component per
field and shows a record by its fields, so a view and its page cannot drift apart. A handler
returns a record, or a :class:`Problem` when a setting is wrong, in which case the page keeps
everything it shows and the message appears at the field concerned. A chart field may hold
:data:`UNCHANGED`: the page keeps the chart it shows (a run redraws its charts less often than
its text, so the browser's drawing does not compete with the engine).
"""
from __future__ import annotations

import re
import statistics
from dataclasses import dataclass
from html import escape
from typing import Any

from specdec.teach import tokenkind
from specdec.teach.render import (
    COLUMNS,
    DASH,
    ROW_HEADERS,
    Segment,
    cache_text,
    cost_details,
    draft_depth,
    draft_stop_text,
    explain,
    output_text,
    plural,
    position_rows,
    round_stats,
    segment_detail,
    segments,
)
from specdec.teach.render_tree import tree_cache_text, tree_explain
from specdec.teach.theory import acceptance, decode_tokens_per_s
from specdec.teach.tokenkind import acceptance_by_kind, kinds_sentence
from specdec.trace import (
    ACCEPTED,
    BONUS,
    PLAIN,
    REJECTED,
    RESAMPLED,
    RoundTrace,
    RunSummary,
    summarize,
)

from . import charts, tree_views
from .charts import CHAIN, TREE
from .state import Walkthrough

# What each kind of token is called on the page; the CSS gives each a colour *and* a second cue.
KIND_NAMES = {ACCEPTED: "accepted draft", REJECTED: "rejected draft (not output)", RESAMPLED: "resampled",
              BONUS: "bonus", PLAIN: "verifier only"}
UNCHANGED = "unchanged"  # a field's value when the page should keep what it shows
VARIES = ("A time is one measurement: the same run can vary by tens of percent from run to run, more on a busy "
          "machine. The Compare tab repeats runs and shows the spread.")


@dataclass(frozen=True)
class Problem:
    """A bad setting or file: the message, in the page's words, and the field it concerns."""

    message: str
    field: str | None = None


@dataclass(frozen=True, kw_only=True)
class StepView:
    status: str
    banner: str           # the tree drafter's shape and why, and the temperature-0 caveat, or ""
    real_tree: bool = False  # offer the button that runs a real tree (the tree drafter ran the chain)
    explain: str
    table: str            # HTML: the drafted tokens, as far as the phase has revealed them ("" for a tree)
    dist: Any             # plotly Figure, or None (hidden)
    ratio: Any
    tree: str             # a tree round: HTML, its token tree as SVG; "" for a chain
    tests: str            # a tree round: HTML, the rule's sibling tests in order, once decided
    mask: str             # a tree round: HTML, the verifier's tree attention mask, once verified
    cache: str
    text: str             # HTML: the committed text, colour-coded
    plain: str            # HTML: the same text, plain, whitespace made visible


@dataclass(frozen=True, kw_only=True)
class SampleView:
    """The rule run 10,000 times on one position of the round on show."""

    summary: str
    histogram: Any


@dataclass(frozen=True, kw_only=True)
class RunView:
    status: str
    text: str
    live: str             # HTML: the live charts while the run goes; "" once the interactive ones are drawn
    plain: str
    stats: str
    ratio: Any
    timing: Any
    acceptance: Any
    tokens: Any
    kinds: Any            # a = kept / tested per kind of token
    kinds_text: str       # what that chart shows, from its numbers
    download: str | None  # path of the trace file once the run has ended


@dataclass(frozen=True, kw_only=True)
class CompareView:
    """Verifier only against speculative decoding; with the tree drafter, against a chain (the draft
    model, same K and settings) and against the tree, in a third column."""

    verdict: str          # HTML: identical, differing or sampled outputs, as a badge; "" until the runs end
    badge: str            # the speed-up and what it means, or the comparison's progress
    spec_title: str       # the second column's heading: "Speculative", or "Chain" beside a tree
    tree_side: bool       # the third column, the tree's, is shown
    base_stats: str
    spec_stats: str
    tree_stats: str
    aligned: str          # HTML: the outputs token for token, the first difference marked
    base_text: str        # HTML: each output as plain text, to copy
    spec_text: str
    tree_text: str        # "" without a tree
    live: str             # HTML: the race while it goes; "" once the interactive chart is drawn
    race: Any
    why: str
    why_chart: Any
    kinds: Any            # a = kept / tested per kind of token, over every speculative run
    kinds_text: str


@dataclass(frozen=True)
class Replayed:
    """A trace file shown in the Run tab, and the settings it restores into the form."""

    view: RunView
    form: dict


def _whitespace(text: str, keep: bool = True) -> str:
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
        return '<div class="spec-tokens spec-empty">No tokens yet.</div>'
    out = []
    for s in segs:
        common = (f'class="tok tok-{s.label}" tabindex="0" aria-label="{escape(segment_detail(s), quote=True)}"'
                  if detail else f'class="tok tok-{s.label}"')
        if s.label == REJECTED:
            out.append(f'<del {common}><span class="rej-text">{_whitespace(s.text, keep=False)}</span></del>')
            continue
        # every space can carry its marker (drawn on request): the final view's; the live one marks
        # only whitespace-only tokens, a lighter page to send and lay out each second
        body = _whitespace(s.text) if detail or not s.text.strip() else escape(s.text)
        out.append(f"<span {common}>{body}</span>")
    return '<div class="spec-tokens">' + "".join(out) + "</div>"


def plain_html(text: str) -> str:
    if not text:
        return '<pre class="spec-plain spec-empty">No text yet.</pre>'
    return f'<pre class="spec-plain">{_whitespace(text)}</pre>'


def legend_html() -> str:
    items = "".join(f'<span class="tok tok-{k}">{escape(name)}</span> ' for k, name in KIND_NAMES.items())
    return f'<div class="spec-legend" role="note" aria-label="token kinds">Tokens: {items}</div>'


def table_html(r: RoundTrace, phase: str) -> str:
    """The drafted tokens as an accessible table with the columns ``phase`` has revealed."""
    headers = ROW_HEADERS[:COLUMNS[phase]]
    # at temperature 0 no u is drawn: the column is left out rather than filled with dashes
    greedy = any(pos.tested for pos in r.positions) and all(pos.u is None for pos in r.positions if pos.tested)
    keep = [i for i, h in enumerate(headers) if not (greedy and h == "u")]
    head = "".join(f'<th scope="col">{escape(headers[i])}</th>' for i in keep)
    body = []
    for row, pos in zip(position_rows(r, phase), r.positions):
        row = [row[i] for i in keep]
        cells = "".join(f'<td class="{"dash" if c == DASH else ""}">{escape(str(c))}</td>' for c in row[1:])
        status = pos.status if COLUMNS[phase] > 5 else "pending"
        body.append(f'<tr class="row-{status}"><th scope="row">{row[0]}</th>{cells}</tr>')
    notes = ["q(x): the draft's probability of the token, the distribution it was sampled from",
             "conf.: the draft's top probability before temperature, what the confidence test reads"]
    if COLUMNS[phase] >= 5:
        notes.append("p(x): the verifier's, from its one forward, each assuming the drafts before it are kept")
    if COLUMNS[phase] > 5:
        notes.append("temperature 0: a draft is kept iff it is the verifier's argmax (p/q = 1), no draw is made"
                     if greedy else "u: the uniform draw; a draft is kept iff u ≤ p/q")
        if any(not pos.tested for pos in r.positions):
            notes.append("—: never tested, so no verdict numbers: its p assumed the drafts before it were kept, and "
                         "one of them was not (or it came after a stop token)")
    return (f'<div class="spec-table"><table aria-label="Drafted tokens"><caption>Drafted tokens, round '
            f'{r.index + 1}</caption><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'
            f'<p class="spec-note">{escape("; ".join(notes))}.</p></div>')


GREEDY_BANNER = ("**Temperature 0: the rule has nothing to decide.** p and q are one-hot, so p/q is 1 (same argmax: "
                 "kept) or 0 (rejected), no draw u is made, and a rejected draft is replaced by the verifier's argmax. "
                 "Set a temperature such as 0.8 to see u, p/q and the residual at work.")
GREEDY_TREE_BANNER = ("**Temperature 0: the rule has nothing to decide.** The walk steps to the child that is the "
                      "verifier's argmax; q only ranked the drafted paths and no u is drawn. Set a temperature such as "
                      "0.8 to see the siblings tested in turn against the residual.")


# (W, N, draft confidence) of the "Draw a real tree" button: a tree on every machine, small enough to read;
# confidence 0 so that every round grows to its N nodes (a threshold stops an unsure tree at its first level)
REAL_TREE = (2, 8, 0.0)
REAL_TREE_BUTTON = "Draw a real tree"


def shape_text(width: int, nodes: int, why: str) -> str:
    """Which shape the tree drafter ran and why (``why`` as the run recorded it, :func:`specdec.decode.tree_shape.resolve`)."""
    if width > 1:
        return f"**The tree drafter's shape:** {why}."
    return (f"**The tree drafter ran the chain.** {why}. So each round is a chain of drafts: no tree, no attention "
            "mask, no sibling tests.")


def _cost_details(r: RoundTrace, phase: str, step_fit: tuple[float, float] | None) -> str:
    """The Verify text's letters (the fit, v(K)) behind a toggle, for the learner who wants them."""
    details = cost_details(r.drafted, r.times.verify, step_fit) if phase == "verify" and r.drafted else ""
    return (f'\n\n<details class="spec-details"><summary>Cost details: the fit and v(K)</summary>\n\n{details}\n\n'
            "</details>") if details else ""


def step_view(walk: Walkthrough, settings, notice: str, step_fit: tuple[float, float] | None = None,
              shape: tuple[int, int, str] | None = None) -> StepView:
    """The round on show, revealed up to its phase, and the text committed so far. ``step_fit``: this
    machine's verifier cost t_f + t_r·L in ms, or None; ``shape``: the tree drafter's (W, N, why) as it ran."""
    drafter, greedy = settings.drafter, settings.decode.sampling.greedy
    segs = segments(list(walk.rounds))
    text, plain = token_html(segs), plain_html(output_text(segs))
    r = walk.shown
    tree_ran = drafter == "tree" and (shape is None or shape[0] > 1)
    banner = (GREEDY_TREE_BANNER if tree_ran else GREEDY_BANNER) if greedy and drafter != "none" else ""
    real_tree = drafter == "tree" and shape is not None and shape[0] == 1
    if drafter == "tree" and shape is not None:
        offer = (f" Press **{REAL_TREE_BUTTON}** to run W = {REAL_TREE[0]}, N = {REAL_TREE[1]} (draft confidence 0, so "
                 "that every round grows all its nodes) and see one."
                 if real_tree else "")
        banner = "\n\n".join(b for b in (shape_text(*shape) + offer, banner) if b)
    if r is None:
        return StepView(status=notice, banner=banner, real_tree=real_tree, explain="", table="", dist=None, ratio=None,
                        tree="", tests="", mask="", cache="", text=text, plain=plain)
    phase = walk.phase
    where = {"draft": "drafted", "verify": "drafted and verified", "accept": "drafted, verified and decided",
             "commit": "drafted, verified, decided and committed"}[phase]
    upcoming = {"draft": "Verify", "verify": "Accept/reject", "accept": "Commit and roll back"}.get(phase)
    nxt = f" Next: **{upcoming}**." if upcoming else " Next: **Draft** (or **Step round**) for the next round."
    decided = phase in ("accept", "commit")
    status = f"{notice}Round {r.index + 1}: {where}.{nxt}"
    if r.tree is not None:  # the tree, its tests and its mask stand in for the chain's table and charts
        asked = (settings.decode.tree_width, settings.decode.tree_nodes)
        paragraph = (tree_explain(r, phase, greedy, settings.decode.k, settings.decode.confidence, step_fit)
                     + _cost_details(r, phase, step_fit))
        return StepView(status=status, banner=banner, real_tree=real_tree, explain=paragraph, table="", dist=None,
                        ratio=None,
                        tree=tree_views.tree_html(r, phase, greedy, asked),
                        tests=tree_views.tests_html(r, greedy) if decided else "",
                        mask=tree_views.mask_html(r, phase) if phase != "draft" else "",
                        cache=tree_cache_text(r, phase), text=text, plain=plain)
    paragraph = explain(r, phase, drafter, greedy, step_fit) + _cost_details(r, phase, step_fit)
    if phase == "draft" and r.positions:
        paragraph += " " + draft_stop_text(r, settings.decode.k, settings.decode.confidence)
    return StepView(
        status=status, banner=banner, real_tree=real_tree, explain=paragraph,
        table=table_html(r, phase) if r.positions else "",
        dist=charts.distribution_figure(r) if decided else None,
        ratio=charts.ratio_figure([r]) if decided and r.positions else None,
        tree="", tests="", mask="", cache=cache_text(r, phase), text=text, plain=plain)


def run_view(rounds: list[RoundTrace], prefill_s: float, status: str, download: str | None = None,
             waited_s: float = 0.0, final: bool = True, others: float | None = None) -> RunView:
    """The run so far. While it goes (``final`` False) the page gets the status, the coloured text
    and the two live charts in HTML, and keeps the rest it shows; at the end, everything, with the
    interactive charts. ``others``: the share of the machine's cores other processes used while
    the run went (:class:`~.state.CpuShare`), said with the speed it costs."""
    segs = segments(rounds)
    some, drafted = bool(rounds), any(r.positions for r in rounds)

    def last(make, needed: bool):
        return (make() if needed else None) if final else UNCHANGED
    return RunView(status=status, text=token_html(segs, detail=final), live="" if final else charts.live_html(rounds),
                   plain=last(lambda: plain_html(output_text(segs)), True),
                   stats=last(lambda: summary_markdown(summarize(rounds, prefill_s), rounds, waited_s, others), some) or "",
                   ratio=last(lambda: charts.ratio_figure(rounds), drafted),
                   timing=last(lambda: charts.timing_figure(rounds), some),
                   acceptance=last(lambda: charts.acceptance_figure(rounds), drafted),
                   tokens=last(lambda: charts.tokens_per_round_figure(rounds), drafted),
                   kinds=last(lambda: kinds_chart({"this run": [rounds]}), drafted),
                   kinds_text=last(lambda: kinds_markdown({"this run": [rounds]}), drafted) or "", download=download)


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


def distinct_runs(runs: list[list[RoundTrace]]) -> list[list[RoundTrace]]:
    """The runs that drafted and tested different tokens: identical runs (every seed at T = 0) once."""
    seen, out = set(), []
    for rounds in runs:
        key = tuple((pos.token_id, pos.status) for r in rounds for pos in r.positions)
        if key not in seen:
            seen.add(key)
            out.append(rounds)
    return out


def kinds_markdown(sides: dict[str, list[list[RoundTrace]]]) -> str:
    """What the per-kind chart shows, a sentence per side, and what its numbers mean."""
    said = [(f"**{name.capitalize()}:** " if len(sides) > 1 else "") + kinds_sentence(acceptance_by_kind(*runs))
            for name, runs in sides.items()]
    return "\n\n".join(said + [KINDS_DEFINED])


def round_spread(rounds: list[RoundTrace]) -> str:
    """The middle half of the rounds' times, as a measure of how much one measurement moves."""
    ms = sorted(1e3 * r.times.total for r in rounds)
    if len(ms) < 4:
        return ""
    q = statistics.quantiles(ms, n=4)
    return f"; rounds took {q[0]:.0f}–{q[2]:.0f} ms (the middle half), median {q[1]:.0f} ms"


def summary_markdown(s: RunSummary, rounds: list[RoundTrace], waited_s: float = 0.0,
                     others: float | None = None) -> str:
    """Every number with its definition, where it is shown."""
    decode = s.wall_s - s.prefill_s
    waited = f"; {waited_s:.1f} s waiting for other sessions' rounds excluded" if waited_s >= 0.05 else ""
    lines = [f"**{decode_tokens_per_s(rounds):.2f} tok/s** decoding = {s.new_tokens} tokens / {decode:.2f} s of this "
             f"session's compute for the rounds{round_spread(rounds)}{waited}",
             f"**{s.tokens_per_s:.2f} tok/s** overall = {s.new_tokens} tokens / {s.wall_s:.2f} s, the prefill (reading "
             f"the prompt, {s.prefill_s:.2f} s) included",
             f"**{s.rounds} rounds**, **{s.target_forwards} verifier passes** = one per round + one over the prompt "
             "(the prefill)"]
    trees = [r.tree for r in rounds if r.tree is not None]
    if s.drafted and trees:
        tested = sum(r.tested for r in rounds)
        depth = sum(draft_depth(r) for r in rounds) / s.rounds
        lines += [f"**a = {s.accepted / tested if tested else 0:.2f}** = steps down the tree kept / tried = "
                  f"{s.accepted} / {tested} (one try per depth the walk reaches, a success when one of the node's "
                  "children is kept; this is the a of the theory curve)",
                  _tokens_per_round(s, rounds, "path nodes kept"),
                  f"**{s.drafted / s.rounds:.2f} nodes drafted per round** on average, at most one path of them "
                  f"kept, **{depth:.2f} deep** (W = "
                  f"{trees[-1].width} children per expanded node at most, N = {trees[-1].budget} nodes at most, K = "
                  "the most depth; the theory curve uses each tree's depth)"]
    elif s.drafted:
        stats = round_stats(rounds)
        tested = sum(r.tested for r in rounds)
        lines += [f"**a = {stats.running_a[-1]:.2f}** = drafts kept / tested = {s.accepted} / {tested} (a draft after "
                  "a rejection is never tested; this is the a of the theory curve)",
                  _tokens_per_round(s, rounds, "drafts kept"),
                  f"**{s.drafted / s.rounds:.2f} drafted per round** on average (adaptive drafting stops early; "
                  "the theory curve uses these lengths)"]
    if others is not None:
        lines.append(f"**other processes used {others:.0%} of this machine's {_cores()} cores** while it ran: this "
                     "page in your browser among them (drawing the text as it grows), and anything else running. The "
                     "engine's threads share the cores with them, so its rounds run slower than "
                     "`python -m specdec generate` in a terminal, which has the cores to itself "
                     "(`benchmarks/app_overhead.py` measures the difference)")
    return "\n".join(f"* {line}" for line in lines) + f"\n\n*{VARIES}*"


def _tokens_per_round(s: RunSummary, rounds: list[RoundTrace], kept: str) -> str:
    """Tokens per round with what they are: the kept drafts, and the token the verifier drew to end each
    round, except a round that ended at a stop token among its kept drafts, which draws none."""
    stopped = sum(r.next_kind is None for r in rounds)
    drawn = f"{s.rounds - stopped} drawn by the verifier (the resampled or bonus token: one per round"
    drawn += (f", none in the {plural(stopped, 'round', 'rounds')} that ended at a stop token among the kept drafts)"
              if stopped else ")")
    return (f"**{s.mean_tokens_per_round:.2f} tokens per round** = {s.new_tokens} tokens / {s.rounds} rounds; "
            f"{s.new_tokens} = {s.accepted} {kept} + {drawn}")


def _cores() -> int:
    import os
    return os.cpu_count() or 1


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


def _median_range(xs: list[float], fmt: str, unit: str) -> str:
    """One measurement, or the median of several with their range: the spread is part of the figure."""
    if len(xs) == 1:
        return f"**{format(xs[0], fmt)}{unit}**"
    return (f"**{format(statistics.median(xs), fmt)}{unit}** (median of {len(xs)} runs; range "
            f"{format(min(xs), fmt)}–{format(max(xs), fmt)}{unit})")


def _side_stats(gens: list, spec: bool) -> str:
    """One side of the comparison: its decode speed over the runs so far, the latest run's figures, then
    a over every run so far: the one acceptance figure of the tab, the a of Why."""
    done = [g for g in gens if g.rounds]
    if not done:
        return ""
    g = done[-1]
    s = g.summary()
    speeds = [decode_tokens_per_s(x.rounds) for x in done]
    lines = [f"{_median_range(speeds, '.2f', ' tok/s')} decoding = tokens / the rounds' compute (the prefill "
             "excluded)",
             f"latest run: {s.new_tokens} tokens in {s.wall_s - s.prefill_s:.2f} s of rounds, prefill "
             f"{s.prefill_s:.2f} s, **{s.target_forwards} verifier passes** (one per round + the prefill)"]
    rounds = [r for x in done for r in x.rounds]
    every = summarize(rounds)
    tested = sum(r.tested for r in rounds)
    over = f" over the {len(done)} runs" if len(done) > 1 else ""
    if spec and every.drafted and rounds[-1].tree is not None:
        lines.append(f"**a = {acceptance(rounds):.2f}** = steps down the tree kept / tried = {every.accepted} / "
                     f"{tested}{over} (one try per depth the walk reaches); {every.drafted / every.rounds:.1f} nodes "
                     f"drafted per round, {every.mean_tokens_per_round:.2f} tokens per round")
    elif spec and every.drafted:
        lines.append(f"**a = {acceptance(rounds):.2f}** = drafts kept / tested = {every.accepted} / {tested}{over} (a "
                     f"draft after a rejection is never tested); {every.mean_tokens_per_round:.2f} tokens per round")
    return "\n".join(f"* {line}" for line in lines)


# Words that are code (in a code fence, inline code or a line of code) against words of prose: the kind
# of text, as the drafted tokens' classes tell it (specdec.teach.tokenkind).
CODE_WORDS, PROSE_WORDS = (tokenkind.KEYWORD, tokenkind.IDENTIFIER), (tokenkind.WORD,)


def _text_kind(runs: list[list[RoundTrace]]) -> str:
    """Whether code or prose drafted better in these runs, with the counts; "" unless each had enough
    tested words and their gap is beyond what sampling alone often gives."""
    counts = acceptance_by_kind(*runs)
    code, prose = (tokenkind.KindCount(kinds[0], sum(c.kept for c in counts if c.kind in kinds),
                                       sum(c.tested for c in counts if c.kind in kinds))
                   for kinds in (CODE_WORDS, PROSE_WORDS))
    if min(code.tested, prose.tested) < tokenkind.MIN_TESTED:
        return ""
    if abs(code.rate - prose.rate) <= tokenkind.sampling_gap(code, prose):
        return ""
    better = "Code" if code.rate > prose.rate else "Prose"
    return (f" {better} drafted better than {'prose' if better == 'Code' else 'code'} in this text: words of code "
            f"(keywords and identifiers) kept {code.rate:.0%} ({code.kept} of {code.tested}), words of prose "
            f"{prose.rate:.0%} ({prose.kept} of {prose.tested}), a gap beyond sampling noise (the kinds of token, "
            "below).")


def _noise_clause(a: float, noise: float) -> str:
    """What draft noise e did to a. Each test keeps at least (1 - e) times as often as without it
    (min(p, (1 - e) q + e/V) >= (1 - e) min(p, q)), so the draft alone would keep at most about a / (1 - e)."""
    if not noise:
        return ""
    said = (f" **Draft noise e = {noise:.2f}** was on and drove the figure down: the draft sampled from "
            f"(1 − e)·q + e/V, so about {noise:.0%} of its drafts were a token drawn uniformly from the whole "
            "vocabulary, which the verifier all but never keeps")
    if noise < 1:
        said += (f"; each test keeps at least (1 − e) times as often as without the noise, so without it a (below) "
                 f"would be at most about a / (1 − e) = {min(1.0, a / (1 - noise)):.2f}")
    return said + ". Set Draft noise to 0 for the draft as it is."


def why_markdown(m, rounds: list[RoundTrace], noise: float = 0.0, text_kind: str = "", who: str = "") -> str:
    """What made the measured speed-up, from the numbers on show: tokens per round against the round's
    cost in verifier-only steps (their ratio is the figure), draft noise when it was on, the kind of
    text when the counts tell code from prose; then the measured costs in the words of the theory
    chart next to it. ``rounds``: the speculative side's rounds over every run, those ``m`` measured."""
    best, k = m.best_k(32), max(1, round(m.k_mean))
    per_round = sum(len(r.emitted) for r in rounds) / len(rounds)
    cost, drafting = (sum(f(r) for r in rounds) / len(rounds) / m.t1 for f in (lambda r: r.times.total,
                                                                                 lambda r: r.times.draft))
    return (f"**Why {m.measured:.2f}x{who}?** A speculative round gave **{per_round:.2f} tokens** (the drafts kept, "
            f"plus one from the verifier) and took as long as **{cost:.2f} verifier-only steps** ({drafting:.2f} "
            f"drafting, {cost - drafting:.2f} verifying and deciding): {per_round:.2f} / {cost:.2f} = "
            f"{m.measured:.2f}x.{_noise_clause(m.a, noise)}{text_kind} Measured here: a drafted token costs "
            f"**c = {m.c:.2f}** of a verifier-only step ({1e3 * m.draft_per_token:.0f} ms against {1e3 * m.t1:.0f} ms); "
            f"a verification of K+1 positions costs **v(K) = {m.v(k):.2f}** steps at the K drafted (the line "
            f"{1e3 * m.t_f:.0f} + {1e3 * m.t_r:.1f}·(K+1) ms, fitted to every round's verification); **a = {m.a:.2f}** "
            f"(the column's a, kept / tested), with **K = {m.k_mean:.1f}** drafted per round on average. The theory "
            f"S(K) = (1 − a^(K+1)) / ((1 − a)(K·c + v(K))) predicts **{m.speedup(k):.2f}x** at K = {k} and is best "
            f"at **K = {best}** ({m.speedup(best):.2f}x). A cheaper draft (smaller c) or a more faithful one (larger "
            "a) moves the whole curve up.")


def tree_why_markdown(chain: list[RoundTrace], tree: list[RoundTrace]) -> str:
    """The tree against the chain, per round: what each drafted, what its rounds cost, what they kept."""
    if not chain or not tree:
        return ""
    def per(rounds, f) -> float:
        return sum(f(r) for r in rounds) / len(rounds)
    drafting, rest = (lambda r: 1e3 * r.times.draft), (lambda r: 1e3 * (r.times.total - r.times.draft))
    tokens, t = (lambda r: len(r.emitted)), tree[-1].tree
    return (f"**The tree against the chain, per round:** it drafted **{per(tree, lambda r: r.drafted):.1f} nodes** "
            f"(W = {t.width}, N = {t.budget}, depth at most K) against the chain's {per(chain, lambda r: r.drafted):.1f} "
            f"tokens, in {per(tree, drafting):.0f} ms of drafting against {per(chain, drafting):.0f} ms; the rest of "
            f"its round, mostly the verifier's forward over N + 1 rows, took {per(tree, rest):.0f} ms against the "
            f"chain's {per(chain, rest):.0f} ms over K + 1; and it kept **{per(tree, tokens):.2f} tokens** against the "
            f"chain's {per(chain, tokens):.2f}. A tree pays more per round to keep more per round: it gains where the "
            "extra tokens outweigh the extra cost.")


# The Compare tab's verdict: each kind a colour *and* an icon and words. ≈ for sampling: the outputs
# are equal in distribution, not in text.
IDENTICAL, DIFFER, BY_DESIGN = "identical", "differ", "by-design"
VERDICT_ICONS = {IDENTICAL: "✓", DIFFER: "≠", BY_DESIGN: "≈"}


def verdict_html(kind: str, headline: str, detail: str) -> str:
    """The comparison's outcome as a badge, announced to screen readers (role=status)."""
    return (f'<div class="cmp-verdict cmp-{kind}" role="status"><span class="cmp-verdict-icon" aria-hidden="true">'
            f'{VERDICT_ICONS[kind]}</span><span><strong>{escape(headline)}</strong><span class="cmp-verdict-detail">'
            f'{escape(detail, quote=False)}</span></span></div>')


def _verdict(complete: list[dict], specs: list[str], greedy: bool, differences: dict | None) -> str:
    """Identical, differing (where and why) or sampled: the runs of every complete group against verifier only."""
    from specdec.teach.render import first_difference
    tree, base = TREE in specs, next(iter(complete[0]))
    if not greedy:
        return verdict_html(BY_DESIGN, "Sampling: outputs differ by design",
                            "At temperature > 0 each run is a sample from the verifier's p, so their texts differ; for "
                            f"equal work {'all three' if tree else 'both'} runs of a pair generate exactly "
                            "max-new-tokens tokens (a stop token does not end them).")
    differ = {}
    for n in specs:
        d = next((d for d in (first_difference(p[base].token_ids, p[n].token_ids) for p in complete) if d is not None),
                 None)
        if d is not None:
            differ[n] = d
    if not differ:
        n = len(complete[-1][base].token_ids)
        each = f" in each of the {len(complete)} runs" if len(complete) > 1 else ""
        return verdict_html(IDENTICAL, f"Identical output: {n} of {n} tokens",
                            ("The chain and the tree each" if tree else "Speculative decoding") +
                            f" reproduced the verifier's greedy tokens exactly{each}.")
    why = (f"At temperature 0 this happens at a tie or near-tie of the verifier's top logits, where a forward over "
           f"{'several' if tree else 'K+1'} positions and a single-token one can round differently and pick different "
           "argmaxes.")
    if differences:  # the measured gap replaces the general explanation
        why = " ".join(f"{'The ' + n + ': t' if tree else 'T'}{d.sentence()[1:]}." for n, d in differences.items())
    headline = ("Outputs differ: " + ", ".join(f"the {n}'s from token {d + 1}" for n, d in differ.items()) if tree else
                f"Outputs differ from token {differ[specs[0]] + 1}")
    return verdict_html(DIFFER, headline, why)


def _tokens(g) -> list[tuple[int, str]]:
    """A run's output as (id, text) per token, the texts joining to its text."""
    return list(zip(g.token_ids, (piece for r in g.rounds for piece in r.pieces)))


def aligned_html(sides: dict[str, list[tuple[int, str]]], settled: bool) -> str:
    """The outputs token for token (ids compared, texts shown), the first side's first. The tokens every
    side shares from the start are one text; from the first that is not shared, each position is a
    column with one token per side, one under another, wrapping like text: a token unlike the first
    side's is marked, and the first position where the sides differ carries its number. While the runs
    go (``settled`` False) a side that has not reached a position yet differs from none there."""
    names, runs = list(sides), list(sides.values())
    width = max(map(len, runs))
    if not width:
        return ""
    ids = [[t for t, _ in run] for run in runs]
    shared = next((i for i in range(width) if len({x[i] if i < len(x) else None for x in ids}) > 1), width)
    sides_words = "both outputs" if len(runs) == 2 else f"all {len(runs)} outputs"
    text = "".join(piece for _, piece in runs[0][:shared])
    same = (f'<div class="cmp-same" aria-label="tokens 1 to {shared}, the same in {sides_words}">{_whitespace(text)}'
            "</div>" if shared else "")
    if shared == width:
        return (f'<div class="cmp-aligned"><p class="cmp-al-key">The same {width} tokens in {sides_words}, shown '
                f"once:</p>{same}</div>")

    def at(run, i):
        return run[i] if i < len(run) else None

    def differs(i: int) -> bool:
        here = [t for t in (at(x, i) for x in ids) if settled or t is not None]
        return len(set(here)) > 1
    first = next((i for i in range(shared, width) if differs(i)), None)
    cols = ['<span class="al-col al-key" aria-hidden="true">' +
            "".join(f'<span class="al-cell al-r{j}">{escape(n)}</span>' for j, n in enumerate(names)) + "</span>"]
    for i in range(shared, width):
        tokens = [at(run, i) for run in runs]
        said = "; ".join(f"{n} {'no token' if t is None else repr(t[1])}" for n, t in zip(names, tokens))
        cells = []
        for j, t in enumerate(tokens):
            unlike = j > 0 and t is not None and (t[0] != tokens[0][0] if tokens[0] is not None else settled)
            kind = " al-none" if t is None else " al-diff" if unlike else ""
            body = "" if t is None else _whitespace(t[1]).replace("\n", "")  # the line break: after the column
            cells.append(f'<span class="al-cell al-r{j}{kind}">{body}</span>')
        mark = f' class="al-col al-first" data-n="{i + 1}"' if i == first else ' class="al-col"'
        cols.append(f'<span{mark} title="{escape(f"token {i + 1}: {said}", quote=True)}">' + "".join(cells)
                    + "</span>")
        if any(t is not None and "\n" in t[1] for t in tokens):
            cols.append('<span class="al-br"></span>')
    rows = ("the verifier-only token above the speculative one" if len(runs) == 2 else
            f"one token per output, from the top: {', '.join(names)}")
    start = (f"Tokens 1–{shared} are the same in {sides_words} (shown once); from token {shared + 1}"
             if shared else "From the first token")
    found = (f" The first difference, token {first + 1}, is marked ▼." if first is not None else
             " No difference yet: one run is ahead.")
    return (f'<div class="cmp-aligned"><p class="cmp-al-key">{start} each position shows {escape(rows)}; a token '
            f"unlike the verifier-only one is underlined in red.{found}</p>{same}"
            f'<div class="cmp-grid">{"".join(cols)}</div></div>')


def _copy_html(title: str, text: str) -> str:
    """One output as plain text under its name, to copy."""
    return f'<p class="cmp-copy-title">{escape(title)}</p>{plain_html(text)}'


def compare_view(pairs: list[dict], settings, finished: bool, final: bool = False,
                 differences: dict | None = None) -> CompareView:
    """Every side over every group of runs so far (verifier only first, then the speculative
    runs), and the texts of the latest group, token for token. While the runs go (``final`` False)
    the race is drawn in HTML; at the end, the interactive chart and why. ``differences``: per
    speculative side, where its greedy output parted from verifier-only, explained
    (:class:`specdec.teach.exactness.Difference`)."""
    from specdec.teach.theory import cost_model
    base, *specs = list(pairs[0])
    tree, chain = TREE in specs, specs[0]
    started = [p for p in pairs if any(g.rounds for g in p.values())] or pairs[:1]
    latest = started[-1]
    complete = [p for p in pairs if all(g.done for g in p.values())]
    badge, verdict = "Running..." if not finished else "", ""
    if finished and complete:
        ups = {n: [decode_tokens_per_s(p[n].rounds) / decode_tokens_per_s(p[base].rounds)
                   for p in complete if p[base].rounds and p[n].rounds] for n in specs}
        if tree:
            badge = (f"**Speed-up** chain {_median_range(ups[CHAIN], '.2f', 'x')}, tree "
                     f"{_median_range(ups[TREE], '.2f', 'x')} = the verifier-only run's time per token / each "
                     "speculative run's, over the rounds (each run's own compute; the prefill excluded).")
        else:
            badge = (f"**Speed-up** {_median_range(ups[chain], '.2f', 'x')} = the verifier-only run's time per token / "
                     "the speculative run's, over the rounds (each run's own compute; the prefill excluded).")
        verdict = _verdict(complete, specs, settings.decode.sampling.greedy, differences)
        if len(ups[chain]) == 1:
            badge += " One run: set Runs to 3 to see how much the figure moves from run to run."
    why, why_chart, race, kinds, kinds_text = "", None, None, None, ""
    if final:
        side = lambda n: [r for p in started for r in p[n].rounds]  # noqa: E731
        model = cost_model(side(base), side(chain))
        runs = {n: distinct_runs([p[n].rounds for p in started]) for n in specs}
        if model is not None and finished:
            why = why_markdown(model, side(chain), settings.decode.draft_noise, _text_kind(runs[chain]),
                               " for the chain" if tree else "")
            why_chart = charts.speedup_figure(model, settings.decode.k)
            if tree:
                why += "\n\n" + tree_why_markdown(side(chain), side(TREE))
        if any(r.positions for n in specs for r in side(n)):  # every speculative run, one bar per side
            kinds, kinds_text = kinds_chart(runs), kinds_markdown(runs)
            copies = len(started) - min(len(r) for r in runs.values())
            if copies:  # at T = 0 every seed drafts and tests the same tokens: counting them twice is no evidence
                kinds_text = (f"*Over {min(len(r) for r in runs.values())} distinct run(s): {copies} run(s) drafted and "
                              "tested exactly the same tokens as another (greedy, T = 0) and are counted once.*\n\n"
                              + kinds_text)
        race = charts.race_figure([(f"{name}{f' (run {i + 1})' if len(pairs) > 1 else ''}", name, p[name].rounds)
                                   for i, p in enumerate(started) for name in p])
    stats = {n: _side_stats([p[n] for p in pairs], n != base) for n in pairs[0]}
    spec_title = "Chain (draft model)" if tree else "Speculative"
    return CompareView(verdict=verdict, badge=badge, spec_title=f"### {spec_title}", tree_side=tree,
                       base_stats=stats[base], spec_stats=stats[chain], tree_stats=stats.get(TREE, ""),
                       aligned=aligned_html({n: _tokens(g) for n, g in latest.items()},
                                            all(g.done for g in latest.values())),
                       base_text=_copy_html("Verifier only", latest[base].text),
                       spec_text=_copy_html(spec_title, latest[chain].text),
                       tree_text=_copy_html("Tree (draft model)", latest[TREE].text) if tree else "",
                       live="" if final else charts.race_html([(n, g.rounds) for n, g in latest.items()]),
                       race=race if final else UNCHANGED, why=why if final else UNCHANGED,
                       why_chart=why_chart if final else UNCHANGED, kinds=kinds if final else UNCHANGED,
                       kinds_text=kinds_text if final else UNCHANGED)
