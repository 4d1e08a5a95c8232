"""Plotly figures for the app, built from trace records and the plain data of ``specdec.teach.render``.

Every legend entry means one thing (one trace per meaning, never a per-bar colour list), every
axis has a title, and a value of zero is drawn as such rather than as a missing bar. The colours of
the kinds of token, of p and q and of the phases are the one style's (:mod:`specdec.teach.style`).
"""
from __future__ import annotations

from itertools import groupby

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from specdec.teach import tokenkind
from specdec.teach.experiment import BUGS, OTHER, Histogram, overlap
from specdec.teach.render import PHASE_NAMES, draft_depth, round_stats
from specdec.teach.style import (
    BAR,
    BASELINE_COLOR,
    CHAIN_COLOR,
    INK,
    LINE,
    MARKS,
    P_COLOR,
    PHASE_COLORS,
    Q_COLOR,
    RESIDUAL_COLOR,
    TREE_COLOR,
)
from specdec.teach.theory import CostModel, tokens_per_round, tokens_per_round_drafted
from specdec.teach.tokenkind import MIN_TESTED, KindCount
from specdec.trace import (
    ACCEPTED,
    BONUS,
    PHASES,
    PLAIN,
    REJECTED,
    UNREACHED,
    DraftPlan,
    RoundTrace,
)

# The Compare tab's sides, named once: the handlers race them, the views lay them out, the charts colour them.
VERIFIER_ONLY, SPECULATIVE, CHAIN, TREE = "verifier only", "speculative", "chain", "tree"
RACE_COLORS = {VERIFIER_ONLY: BASELINE_COLOR, SPECULATIVE: CHAIN_COLOR, CHAIN: CHAIN_COLOR, TREE: TREE_COLOR}
# Tokens that draw as specks or as nothing in a tick label, named instead: (one, several)
NAMED = {"`": ("backtick", "backticks"), " ": ("space", "spaces"), "\n": ("newline", "newlines"), "\t": ("tab", "tabs")}
MODEBAR_PX = 32  # plotly's upright toolbar at the right edge, with a little air: a right-hand axis stays clear of it


def _layout(fig: go.Figure, title: str, height: int = 340, subtitle: str = "", **kw) -> go.Figure:
    """Title (and subtitle lines) at the top of the figure, the legend at its bottom, both placed in
    the figure's own box and pushing the plot's margins (plotly's automargin), so that neither
    meets the axis titles or tick labels at any width: a narrow screen gets a shorter plot, never
    overlapping labels. Each legend entry beyond two adds a row's height: on a narrow screen
    the entries stack, one per row."""
    text = title + "".join(f"<br><sup>{line}</sup>" for line in subtitle.split("<br>") if line)
    entries = sum(1 for t in fig.data if t.name and t.showlegend is not False)
    fig.update_layout(title=dict(text=text, font=dict(size=14), x=0.01, xref="container", y=1, yref="paper",
                                 yanchor="bottom", pad=dict(b=10), automargin=True),
                      height=height + 20 * max(0, entries - 2), template="plotly_white",
                      margin=dict(l=60, r=20, t=30, b=10), **kw)
    fig.update_layout(legend=dict(orientation="h", x=0.01, xref="container", y=0, yref="container",
                                  yanchor="bottom", font=dict(size=11)),
                      # plotly's toolbar upright at the right edge, where it covers no title, with its PNG button
                      modebar=dict(orientation="v", remove=["lasso2d", "select2d", "autoScale2d"]))
    return fig


def warm_up() -> None:
    """Build one figure of each trace type: plotly loads its validators (a few hundred ms) on first
    use, which should not land inside a run's first chart refresh."""
    _layout(go.Figure([go.Bar(x=[1], y=[1]), go.Scatter(x=[1], y=[1])]), "warm-up", subtitle="a<br>b")


def token_label(text: str) -> str:
    """A token as an axis label: quoted, whitespace made visible, short; a token of whitespace and
    backticks alone is named, unquoted (``3 backticks``, ``newline, 4 spaces``)."""
    if text and set(text) <= set(NAMED):
        named = ", ".join(NAMED[c][0] if n == 1 else f"{n} {NAMED[c][1]}"
                          for c, n in ((c, len(list(run))) for c, run in groupby(text)))
        return named if len(named) <= 24 else named[:23] + "…"
    shown = "".join(MARKS.get(c, c) for c in text)
    return repr(shown if len(shown) <= 12 else shown[:11] + "…")


def number(x: float) -> str:
    """A probability or ratio as the tables print it, three decimals; one too small for them in two
    significant figures (0.00042, never a false 0.000)."""
    return f"{x:.2g}" if 0 < abs(x) < 0.0005 else f"{x:.3f}"


def _luminance(color: str) -> float:
    """WCAG relative luminance of a #rrggbb colour."""
    def channel(v: int) -> float:
        v /= 255
        return v / 12.92 if v <= 0.03928 else ((v + 0.055) / 1.055) ** 2.4
    r, g, b = (channel(int(color[i:i + 2], 16)) for i in (1, 3, 5))
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(a: str, b: str) -> float:
    """The WCAG contrast ratio of two #rrggbb colours."""
    la, lb = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


def on_white(color: str, opacity: float) -> str:
    """What a fill of ``color`` at ``opacity`` looks like on the white page."""
    return "#" + "".join(f"{round(opacity * int(color[i:i + 2], 16) + (1 - opacity) * 255):02x}" for i in (1, 3, 5))


def text_on(fill: str) -> str:
    """White or the page's ink, whichever reads better on ``fill`` (a saturated green takes ink: white is 3.3:1)."""
    return max(("#ffffff", INK), key=lambda ink: contrast(ink, fill))


def ratio_figure(rounds: list[RoundTrace]) -> go.Figure:
    """min(1, p/q) per tested drafted token, one bar trace per verdict, and the draws u as
    markers: a token is kept exactly when its u marker is at or below the top of its bar. An
    untested token (after a rejection) gets a grey marker and no numbers: the rule never read them."""
    single = len(rounds) == 1
    by_status = {s: ([], [], []) for s in (ACCEPTED, REJECTED)}  # x, y, hover
    zero_x, u_x, u_y, untested_x, untested_hover, labels, n = [], [], [], [], [], [], 0
    for r in rounds:
        for i, pos in enumerate(r.positions):
            if pos.status not in (ACCEPTED, REJECTED, UNREACHED):  # after a stop token: never emitted
                continue
            n += 1
            labels.append(f"{i + 1}: {token_label(pos.text)}")
            where = f"round {r.index + 1}, position {i + 1}: {pos.text!r}"
            if not pos.tested:
                untested_x.append(n)
                untested_hover.append(f"{where}<br>not tested: after the rejection, so no p/q and no u")
                continue
            xs, ys, hover = by_status[pos.status]
            xs.append(n)
            ys.append(min(1.0, pos.ratio))
            if pos.u is None:  # temperature 0: no draw; the draft is the verifier's argmax or it is not
                hover.append(f"{where}<br>p = {pos.p:.4f}, q = {pos.q:.4f}, p/q = {pos.ratio:.3f}: "
                             f"{'kept: the verifier' if pos.status == ACCEPTED else 'rejected: not the verifier'}'s argmax")
            else:
                hover.append(f"{where}<br>p = {pos.p:.4f}, q = {pos.q:.4f}, p/q = {pos.ratio:.3f}, u = {pos.u:.3f}: "
                             f"{'kept' if pos.status == ACCEPTED else 'rejected'}")
                u_x.append(n)
                u_y.append(pos.u)
            if pos.ratio == 0:
                zero_x.append(n)
    drawn = bool(u_x) or not any(xs for xs, _, _ in by_status.values())
    names = ({ACCEPTED: "kept (u ≤ p/q)", REJECTED: "rejected (u > p/q)"} if drawn else
             {ACCEPTED: "kept: the verifier's argmax", REJECTED: "rejected: not the verifier's argmax"})
    fig = go.Figure([go.Bar(x=xs, y=ys, name=names[s], marker_color=BAR[s], hovertext=hover, hoverinfo="text")
                     for s, (xs, ys, hover) in by_status.items() if xs])
    if zero_x:  # a bar of height 0 is invisible: mark p/q = 0 explicitly
        fig.add_trace(go.Scatter(x=zero_x, y=[0] * len(zero_x), mode="markers", name="p/q = 0 (verifier: impossible)",
                                 marker=dict(symbol="x-thin-open", size=14, color=BAR[REJECTED], line_width=3),
                                 hoverinfo="skip"))
    if untested_x:
        fig.add_trace(go.Scatter(x=untested_x, y=[0.04] * len(untested_x), mode="markers", name="not tested",
                                 marker=dict(symbol="line-ew-open", size=16, color=BAR[UNREACHED], line_width=3),
                                 hovertext=untested_hover, hoverinfo="text"))
    if u_x:
        fig.add_trace(go.Scatter(x=u_x, y=u_y, name="draw u", mode="markers", hoverinfo="skip",
                                 marker=dict(color=INK, size=8, symbol="diamond")))
    fig.add_hline(y=1.0, line_dash="dash", line_color=LINE[ACCEPTED], annotation_text="p ≥ q: always kept",
                  annotation_position="top left")
    xaxis = (dict(tickmode="array", tickvals=list(range(1, n + 1)), ticktext=labels) if single else
             dict(title="drafted token, in order (hover: round, position)", tickmode="auto", nticks=12))
    if single:
        xaxis["title"] = "drafted token"
    return _layout(fig, "The test per drafted token",
                   subtitle="kept iff the draw u ≤ p/q" if drawn else "temperature 0: kept iff p/q = 1 (no draw)",
                   barmode="overlay", yaxis=dict(range=[0, 1.12], title="min(1, p/q) and u" if drawn else "min(1, p/q)"),
                   xaxis=xaxis)


def decisive_position(r: RoundTrace) -> int | None:
    """The drafted position that decided the round: the rejected one, else None (all kept)."""
    return r.rejected_at


def distribution_figure(r: RoundTrace) -> go.Figure:
    """p and q on one shared token axis at the position that decided the round, with the drafted
    token x highlighted and the residual norm(max(0, p - q)) drawn over them; or, when every draft
    was kept, the verifier's p at the next position with the bonus token highlighted."""
    i = decisive_position(r)
    if i is None:
        top = list(r.next_top)
        chosen = r.next_token.token_id if r.next_token else None
        fig = go.Figure([go.Bar(x=[token_label(t.text) for t in top], y=[t.prob for t in top], name="p (verifier)",
                                marker_color=P_COLOR)])
        if chosen is not None and chosen in [t.token_id for t in top]:
            _highlight(fig, [t.token_id for t in top].index(chosen), "drawn")
        if r.next_kind == BONUS:
            one = r.drafted == 1
            title = "The one draft kept" if one else f"All {r.drafted} drafts kept"
            sub = f"bonus {token_label(r.next_token.text)} drawn from p after {'it' if one else 'them'}"
        elif r.next_kind == PLAIN:
            title, sub = "Nothing drafted", f"{token_label(r.next_token.text)} drawn from p, as plain decoding does"
        else:
            title, sub = "The kept drafts end in a stop token", token_label(r.positions[r.n_accepted - 1].text)
        return _layout(fig, title, subtitle=sub, yaxis=dict(range=[0, 1.05], title="probability"),
                       xaxis=dict(title="token"))
    pos = r.positions[i]
    cands = list(pos.candidates)
    xs = [token_label(c.text) for c in cands]
    greedy = pos.u is None  # temperature 0: no draw, and the replacement is the verifier's argmax, not a residual
    traces = [go.Bar(x=xs, y=[c.p for c in cands], name="p (verifier)", marker_color=P_COLOR),
              go.Bar(x=xs, y=[c.q for c in cands], name="q (draft)", marker_color=Q_COLOR)]
    if not greedy:
        mass = max(1.0 - pos.beta, 1e-12)  # the residual's total mass before normalising: 1 - sum min(p, q)
        residual = [max(0.0, c.p - c.q) / mass for c in cands]
        # one marker per token, no line: the tokens are categories, not points on a curve
        traces.append(go.Scatter(x=xs, y=residual, name="residual norm(max(0, p − q))", mode="markers",
                                 marker=dict(size=12, symbol="star", color=RESIDUAL_COLOR,
                                             line=dict(color="#ffffff", width=1))))
    fig = go.Figure(traces)
    _highlight(fig, [c.token_id for c in cands].index(pos.token_id),
               "drafted x, not the verifier's argmax" if greedy else f"drafted x, p/q = {number(pos.ratio)}")
    title = f"Position {i + 1}: {token_label(pos.text)} rejected"
    subtitle = (f"temperature 0: p and q are one-hot; {token_label(r.next_token.text)}, the verifier's argmax, replaces it"
                if greedy else
                f"{token_label(r.next_token.text)} drawn from the residual; tokens: the top of p and of q, and x<br>"
                f"β = Σ min(p, q) = {number(pos.beta)}: the chance a draft from q is kept here")
    return _layout(fig, title, subtitle=subtitle, barmode="group", yaxis=dict(range=[0, 1.12], title="probability"),
                   height=400)


def _highlight(fig: go.Figure, index: int, label: str) -> None:
    fig.add_vrect(x0=index - 0.5, x1=index + 0.5, fillcolor="#fde68a", opacity=0.45, line_width=0, layer="below",
                  annotation_text=label, annotation_position="top", annotation_font_size=11)


def timing_figure(rounds: list[RoundTrace]) -> go.Figure:
    xs = [r.index + 1 for r in rounds]
    fig = go.Figure([go.Bar(x=xs, y=[1000 * getattr(r.times, ph) for r in rounds], name=PHASE_NAMES[ph],
                            marker_color=PHASE_COLORS[ph]) for ph in PHASES])
    return _layout(fig, "Time per round by phase", subtitle="this session's compute", barmode="stack",
                   xaxis_title="round", yaxis_title="milliseconds")


def acceptance_figure(rounds: list[RoundTrace]) -> go.Figure:
    s = round_stats(rounds)
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_trace(go.Bar(x=s.rounds, y=s.accepted, name="drafts kept", marker_color=BAR[ACCEPTED],
                         hovertemplate="round %{x}: %{y} kept"))
    fig.add_trace(go.Bar(x=s.rounds, y=[d - a for d, a in zip(s.drafted, s.accepted)], name="drafts not kept",
                         marker_color=BAR[UNREACHED], hovertemplate="round %{x}: %{y} not kept"))
    fig.add_trace(go.Scatter(x=s.rounds, y=s.running_a, name="running a = kept / tested", mode="lines+markers",
                             line_color=INK), secondary_y=True)
    paced = [r for r in rounds if r.plan is not None]
    trees = any(r.plan.width > 1 for r in paced)  # a tree drafter's adaptive run: the mark is N for a tree, K for a chain
    asked, means = (("drafts asked for (adaptive K)", "a tree's N, a chain's K") if trees
                    else ("K asked for (adaptive K)", "its K"))
    drafting = [r for r in paced if r.plan.asked > 0]
    plain = [r for r in paced if r.plan.asked == 0]
    if drafting:  # an adaptive run: the K (or tree) each round asked for, chosen from the rounds before it
        fig.add_trace(go.Scatter(x=[r.index + 1 for r in drafting], y=[r.plan.asked for r in drafting],
                                 mode="markers", name=asked, marker=dict(symbol="line-ew-open", size=14, color=INK),
                                 text=[_shape(r.plan) for r in drafting], hovertemplate="round %{x}: asked for %{text}"))
    if plain:  # K = 0: nothing drafted, so no bar; a mark above the axis so that the round is not empty space
        fig.add_trace(go.Scatter(x=[r.index + 1 for r in plain], y=[0.25] * len(plain), mode="markers",
                                 name="a plain verifier step (adaptive K: 0)",
                                 marker=dict(symbol="x-thin-open", size=9, color=INK, line_width=1.5),
                                 hovertemplate="round %{x}: a plain verifier step, nothing drafted"))
    drafts = "drafted nodes" if trees or any(r.tree is not None for r in rounds) else "drafted tokens"
    fig.update_yaxes(title_text=drafts, range=[0, max(s.k, *(r.plan.asked for r in paced), 1) + 0.5], secondary_y=False)
    fig.update_yaxes(title_text="a", range=[0, 1.05], tickmode="array", tickvals=[0, 0.25, 0.5, 0.75, 1],
                     showgrid=False, secondary_y=True)
    fig = _layout(fig, "Drafts kept per round", subtitle="running a = kept / tested"
                  + (f"; marks: {means} asked for, × a plain step" if paced else ""),
                  barmode="stack", xaxis_title="round")
    # the right-hand axis a, its tick labels and title (about 40 px), left of the toolbar
    return fig.update_layout(margin_r=MODEBAR_PX + 40)


def _shape(plan: DraftPlan) -> str:
    """A plan's choice in a few words, for the mark's hover."""
    return f"a tree, W = {plan.width}, N = {plan.budget}" if plan.width > 1 else f"K = {plan.k}"


def tokens_per_round_figure(rounds: list[RoundTrace]) -> go.Figure:
    """Measured tokens per round against E(a, K) averaged over the K each round really drafted
    (adaptive drafting drafts fewer than the nominal K); for a tree, K is its depth and a the share
    of steps down the tree that succeeded (:func:`specdec.teach.render.draft_depth`)."""
    s = round_stats(rounds)
    drafted = [draft_depth(r) for r in rounds]
    k = max(*drafted, 1) if drafted else 1
    tree = any(r.tree is not None for r in rounds)
    grid = [i / 50 for i in range(51)]
    mean_k = sum(drafted) / len(drafted) if drafted else 0.0
    name = (f"theory for a chain as deep as each tree (mean {mean_k:.1f})" if tree else
            f"theory for the K drafted (mean {mean_k:.1f})")
    fig = go.Figure([go.Scatter(x=grid, y=[tokens_per_round_drafted(a, drafted) for a in grid], mode="lines",
                                name=name, line_color="#6b7280")])
    if rounds:
        # points, not a line: joined in time order they would read as a curve over a
        fig.add_trace(go.Scatter(x=s.running_a, y=s.running_tokens, mode="markers", name="measured, after each round",
                                 marker=dict(size=6, color="#2563eb", opacity=0.6)))
        fig.add_trace(go.Scatter(x=s.running_a[-1:], y=s.running_tokens[-1:], mode="markers", name="now",
                                 marker=dict(color="#dc2626", size=12)))
    return _layout(fig, "Tokens per round against the theory",
                   subtitle="(1 − a^(K+1)) / (1 − a), " + ("K = each tree's depth" if tree else "each round's K")
                   + "<br>if every draft is kept independently with probability a",
                   xaxis_title="acceptance a (steps kept / tried)" if tree else "acceptance a (kept / tested)",
                   yaxis_title="tokens per round", xaxis=dict(range=[0, 1]), yaxis=dict(range=[0, k + 1.2]))


FAINT = 0.35  # the opacity of a bar resting on fewer than MIN_TESTED tests
# The classes as a chart's rows: short enough for a 400 px screen (specdec.teach.tokenkind.KIND_NAMES in full)
KIND_ROWS = {tokenkind.WHITESPACE: "whitespace", tokenkind.PUNCTUATION: "punctuation, operators",
             tokenkind.KEYWORD: "keywords", tokenkind.IDENTIFIER: "identifiers", tokenkind.NUMBER: "numbers",
             tokenkind.WORD: "prose words", tokenkind.OTHER: "other"}


def kinds_figure(sides: dict[str, tuple[KindCount, ...]]) -> go.Figure:
    """a = kept / tested per class of token, one bar trace per side (the Run tab has one; a
    comparison with the tree drafter, the chain's and the tree's). Each row's label carries its
    counts, kept/tested per side, so a rate is never read without how many drafts it rests on; a
    class with no tested draft has no bar and says so."""
    names = list(sides)
    counts = list(sides.values())
    rows = []
    for i, kind in enumerate(c.kind for c in counts[0]):
        per = [side[i] for side in counts]
        said = " · ".join(f"{c.kept}/{c.tested}" if c.tested else "none tested" for c in per)
        rows.append(f"{KIND_ROWS[kind]}<br>{said}")
    # one side is green (kept) in Run and Compare alike; a bar resting on few tests is drawn faint, and
    # its label, inside the bar, in the ink that reads on it
    def bar(name: str, side: tuple[KindCount, ...]) -> go.Bar:
        color = RACE_COLORS.get(name, BAR[ACCEPTED]) if len(sides) > 1 else BAR[ACCEPTED]
        opacity = [1.0 if c.tested >= MIN_TESTED else FAINT for c in side]
        return go.Bar(y=rows, x=[c.rate or 0 for c in side], orientation="h", name=name, marker_color=color,
                      marker_opacity=opacity, showlegend=len(sides) > 1,
                      text=[f"{c.rate:.0%}" if c.tested else "" for c in side], textposition="auto",
                      insidetextfont=dict(color=[text_on(on_white(color, o)) for o in opacity]),
                      outsidetextfont=dict(color=INK),
                      hovertemplate=[f"{name}: {KIND_ROWS[c.kind]}, {c.kept} kept of {c.tested} tested"
                                     "<extra></extra>" for c in side])
    fig = go.Figure([bar(name, side) for name, side in zip(names, counts)])
    who = f" ({' · '.join(names)})" if len(sides) > 1 else ""
    return _layout(fig, "Drafts kept by kind of token",
                   subtitle=f"a = kept / tested per kind{who}: drafts kept over<br>drafts the rule tested (after "
                            "a rejection none is)",
                   height=120 + 44 * len(rows), barmode="group",
                   xaxis=dict(title="a = kept / tested", range=[0, 1], tickformat=".0%"),
                   yaxis=dict(autorange="reversed", automargin=True))


def race_figure(runs: list[tuple[str, str, list[RoundTrace]]]) -> go.Figure:
    """Tokens generated against elapsed time (prefill included) for each (name, kind, rounds),
    one colour per kind (a key of RACE_COLORS), one dash per repeat."""
    fig = go.Figure()
    dashes = {}
    for name, kind, rounds in runs:
        ts, ns, n = [0.0], [0], 0
        for r in rounds:
            n += len(r.emitted)
            ts.append(r.elapsed)
            ns.append(n)
        dash = dashes.setdefault(name.removeprefix(kind), ("solid", "dot", "dash", "longdash", "dashdot")[len(dashes) % 5])
        fig.add_trace(go.Scatter(x=ts, y=ns, mode="lines+markers", name=name, line_shape="hv",
                                 line=dict(color=RACE_COLORS[kind], dash=dash), marker=dict(size=4)))
    return _layout(fig, "Tokens against compute time", subtitle="each run's own, the prefill included",
                   xaxis_title="seconds", yaxis_title="tokens")


def drafters_figure(rows) -> go.Figure:
    """The drafters' race (:class:`specdec.teach.race.RaceRow` per drafter): the speed-up over verifier-only
    decoding, against a line at 1 (verifier-only itself), and the tokens emitted per verifier forward."""
    names = [r.label for r in rows]
    colors = [BASELINE_COLOR if r.acceptance is None else CHAIN_COLOR for r in rows]
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.14,
                        subplot_titles=("speed-up", "tokens per round"))
    fig.add_trace(go.Bar(x=names, y=[r.speedup for r in rows], marker_color=colors, name="speed-up",
                         text=[f"{r.speedup:.2f}x" for r in rows], textposition="outside", showlegend=False),
                  row=1, col=1)
    fig.add_trace(go.Bar(x=names, y=[r.tokens_per_round for r in rows], marker_color=colors, name="tokens per round",
                         text=[f"{r.tokens_per_round:.2f}" for r in rows], textposition="outside",
                         showlegend=False), row=1, col=2)
    fig.add_hline(y=1.0, line_dash="dot", line_color="#6b7280", row=1, col=1)  # named in the subtitle: a note
    # on the line would sit under the first bar's number
    fig.update_yaxes(title_text="decode tok/s / verifier-only's", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text="tokens per verifier forward", rangemode="tozero", row=1, col=2)
    fig.update_xaxes(title_text="drafter", tickangle=-30, automargin=True)
    # the tallest bar's number above it inside the plot (not clipped at its top); a number too wide for
    # its bar (a narrow screen) hidden rather than laid over its neighbours: the hover still gives it
    top = max([r.speedup for r in rows] + [1.0]), max([r.tokens_per_round for r in rows] + [1.0])
    fig.update_yaxes(range=[0, top[0] * 1.2], row=1, col=1)
    fig.update_yaxes(range=[0, top[1] * 1.2], row=1, col=2)
    fig.update_traces(cliponaxis=False)
    fig.update_layout(uniformtext=dict(minsize=9, mode="hide"))
    return _layout(fig, "Every drafter on one prompt", height=380,
                   subtitle="decode only; grey, dotted: verifier only")


def speedup_figure(m: CostModel, k_max: int) -> go.Figure:
    """S(K) = E(a, K) / (K c + v(K)) over a constant K (:class:`CostModel`), with the measured speed-up on it."""
    ks = list(range(1, max(k_max, 8) + 1))
    fig = go.Figure([
        go.Scatter(x=ks, y=[m.speedup(k) for k in ks], mode="lines+markers", name="predicted S(K), constant K",
                   line_color="#6b7280"),
        go.Scatter(x=[m.k_mean], y=[m.measured], mode="markers", name="this comparison (mean K drafted)",
                   marker=dict(color="#dc2626", size=13, symbol="star")),
    ])
    fig.add_hline(y=1.0, line_dash="dot", line_color="#9ca3af", annotation_text="no gain",
                  annotation_position="bottom right")
    return _layout(fig, "Predicted speed-up over K", subtitle=f"a = {m.a:.2f}, c = {m.c:.2f}, v(K) measured",
                   xaxis=dict(title="K, drafts per round", dtick=1), yaxis=dict(title="speed-up", rangemode="tozero"))


def histogram_figure(h: Histogram) -> go.Figure:
    """p against what the rule emitted and what the bug emitted (top); below, each histogram's total variation
    from p on one axis with the noise bound drawn, so that "beyond the noise" is seen, not read."""
    xs = [token_label(t) if t != OTHER else "other" for t in h.labels]
    rule, bug, bound = h.tv_correct, h.tv_bug, h.noise_bound
    bug_name = BUGS[h.kind].split(",")[0] + " bug"
    fig = make_subplots(rows=2, cols=1, row_heights=[0.64, 0.36], vertical_spacing=0.3)
    for y, name, color in ((h.p, "p (verifier)", P_COLOR), (h.correct, f"the rule: TV {rule:.3f}", "#16a34a"),
                           (h.bug, f"{bug_name}: TV {bug:.3f}", "#7c3aed")):
        fig.add_trace(go.Bar(x=xs, y=list(y), name=name, marker_color=color), row=1, col=1)
    # the within-noise region as one filled box: its legend entry is the bound
    fig.add_trace(go.Scatter(x=[0, bound, bound, 0, 0], y=[-0.5, -0.5, 1.5, 1.5, -0.5], fill="toself", mode="lines",
                             fillcolor="rgba(107, 114, 128, 0.18)", line=dict(color="#6b7280", dash="dash", width=2),
                             name=f"noise bound {bound:.3f}: what sampling alone may give", hoverinfo="skip"),
                  row=2, col=1)
    fig.add_trace(go.Bar(y=[0, 1], x=[rule, bug], orientation="h", marker_color=["#16a34a", "#7c3aed"],
                         text=[f"{rule:.3f}", f"{bug:.3f}"], textposition="outside", cliponaxis=False,
                         showlegend=False, hovertemplate="TV from p %{x:.3f}<extra></extra>"), row=2, col=1)
    fig.update_yaxes(title_text="share", rangemode="tozero", row=1, col=1)
    fig.update_xaxes(title_text="token", row=1, col=1)
    fig.update_yaxes(title_text="emitted by", tickvals=[0, 1], ticktext=["the rule", "the bug"], range=[-0.5, 1.5],
                     row=2, col=1)
    fig.update_xaxes(title_text="total variation from p", range=[0, 1.3 * max(rule, bug, bound, 0.01)], row=2, col=1)
    return _layout(fig, f"{h.trials:,} rounds at one position", height=520, barmode="group",
                   subtitle="top: share of rounds emitting each token<br>bottom: distance from p, against the noise")


def overlap_figure(p, q, labels=None) -> go.Figure:
    """(C,) p and q overlaid as outlines; each token's bar split into min(p, q) (kept drafts: its total is β)
    and the part of p above q (the residual before it is normalised, which the resample fills), with q's
    excess over p drawn on top; and the residual norm(max(0, p − q)) the replacement is drawn from, as stars."""
    shared, residual, excess, beta = overlap(p, q)
    xs = [token_label(t) if t != OTHER else "other" for t in labels] if labels else [f"token {i}" for i in range(len(p))]
    traces = [
        go.Bar(x=xs, y=shared.tolist(), name=f"min(p, q): kept, Σ = β = {beta:.2f}", marker_color=BAR[ACCEPTED]),
        go.Bar(x=xs, y=residual.tolist(), name=f"max(0, p − q): resampled, Σ = 1 − β = {1 - beta:.2f}",
               marker_color="#7c3aed"),
        go.Bar(x=xs, y=excess.tolist(), name="max(0, q − p): rejected", marker_color=BAR[REJECTED],
               opacity=0.35),
        go.Scatter(x=xs, y=p.tolist(), mode="markers", name="p (verifier)",
                   marker=dict(symbol="line-ew-open", size=30, color=P_COLOR, line=dict(width=3))),
        go.Scatter(x=xs, y=q.tolist(), mode="markers", name="q (draft)",
                   marker=dict(symbol="line-ew-open", size=30, color=Q_COLOR, line=dict(width=3, dash="dot"))),
    ]
    if beta < 1:
        shares = (residual / residual.sum()).tolist()  # a star only where the residual puts mass
        traces.append(go.Scatter(x=[x for x, v in zip(xs, shares) if v > 0], y=[v for v in shares if v > 0],
                                 mode="markers", name="residual norm(max(0, p − q))",
                                 marker=dict(size=12, symbol="star", color=RESIDUAL_COLOR,
                                             line=dict(color="#ffffff", width=1))))
    top = max(float(p.max()), float(q.max()), float((residual / residual.sum()).max()) if beta < 1 else 0.0)
    return _layout(go.Figure(traces), "Where p and q overlap", barmode="stack", height=420,
                   subtitle="kept drafts give min(p, q), the resample gives p above q;<br>q above p is rejected",
                   yaxis=dict(title="probability", range=[0, 1.08 * top]), xaxis=dict(title="token"))


def tokens_per_round_k_figure(alpha: float, k: int, k_max: int = 16) -> go.Figure:
    """E(α, K) = (1 − α^(K+1)) / (1 − α) over K with α held constant, the chosen K marked."""
    ks = list(range(1, k_max + 1))
    fig = go.Figure([go.Scatter(x=ks, y=[tokens_per_round(alpha, j) for j in ks], mode="lines+markers",
                                name=f"E(α, K) at α = {alpha:.2f}", line_color="#6b7280"),
                     go.Scatter(x=[k], y=[tokens_per_round(alpha, k)], mode="markers", name=f"K = {k}",
                                marker=dict(color="#dc2626", size=13, symbol="star"))])
    return _layout(fig, "Expected tokens per round over K", subtitle="α = β at every position, independently",
                   xaxis=dict(title="K, drafts per round", range=[0.5, k_max + 0.5]),
                   yaxis=dict(title="tokens per round", rangemode="tozero"))


LIVE_HEIGHT = 90  # px: the live charts' plot area


def live_html(rounds: list[RoundTrace], last: int = 60) -> str:
    """The two live charts of a run, drawn in plain HTML while it goes (a plotly redraw costs the
    browser enough CPU to slow the engine on a 2-core machine; these cost about what the text
    does): time per round by phase, and min(1, p/q) with the draw u per tested drafted token,
    over the latest rounds. Colours come from classes (``style.css``); the interactive plotly
    charts replace these when the run ends."""
    shown = rounds[-last:]
    if not shown:
        return ""
    top = max(r.times.total for r in shown) or 1.0
    bars = []  # one element per bar, its phases as a stacked gradient: few elements to lay out each refresh
    for r in shown:
        total, stops, at = r.times.total or 1.0, [], 0.0
        for ph in PHASES:
            end = at + 100 * getattr(r.times, ph) / total
            stops.append(f"{PHASE_COLORS[ph]} {at:.0f}% {end:.0f}%")
            at = end
        bars.append(f'<a style="height:{LIVE_HEIGHT * r.times.total / top:.0f}px;background:linear-gradient('
                    f'to top,{",".join(stops)})"></a>')
    tests, drawn = [], False  # the bar min(1, p/q) with the draw u as a dark band in the same element
    for r in shown:
        for pos in r.positions:
            if pos.tested and pos.u is None:  # temperature 0: no draw, the bar alone
                h = LIVE_HEIGHT * min(1.0, pos.ratio)
                tests.append(f'<a class="v-{pos.status} no-u" style="height:{max(h, 2):.0f}px;--bar:{h:.0f}px"></a>')
            elif pos.tested:
                h, u, drawn = LIVE_HEIGHT * min(1.0, pos.ratio), LIVE_HEIGHT * pos.u, True
                tests.append(f'<a class="v-{pos.status}" style="height:{max(h, u + 2):.0f}px;--u:{u:.0f}px;'
                             f'--bar:{h:.0f}px"></a>')
    tests = tests[-2 * last:]
    phases = " ".join(f'<span class="live-key ph-{ph}"></span>{PHASE_NAMES[ph]}' for ph in PHASES)
    verdicts = ('<span class="live-key v-accepted"></span>kept <span class="live-key v-rejected"></span>rejected' +
                (' <span class="live-key live-u"></span>draw u' if drawn else ' (temperature 0: no draw u)'))
    test_chart = "" if not tests else (
        f'<figure class="live-chart"><figcaption>The test per drafted token, min(1, p/q), live (latest {len(tests)})'
        f'</figcaption><div class="live-plot live-tests">{"".join(tests)}</div>'
        f'<div class="live-legend">{verdicts}</div></figure>')
    return (f'<div class="live-charts" aria-label="live charts"><figure class="live-chart"><figcaption>Time per '
            f'round by phase, live (latest {len(shown)} rounds; tallest {1e3 * top:.0f} ms)</figcaption>'
            f'<div class="live-plot live-times">{"".join(bars)}</div><div class="live-legend">{phases}</div></figure>'
            f'{test_chart}</div>')


def race_html(sides: list[tuple[str, list[RoundTrace]]]) -> str:
    """The race while it goes: tokens so far and the compute they took, per (name, rounds), as bars."""
    most = max(1, *(sum(len(r.emitted) for r in rounds) for _, rounds in sides))
    rows = []
    for name, rounds in sides:
        n = sum(len(r.emitted) for r in rounds)
        t = rounds[-1].elapsed if rounds else 0.0
        rows.append(f'<div class="race-row"><span class="race-name">{name}</span><span class="race-bar" '
                    f'style="width:{70 * n / most:.1f}%;background:{RACE_COLORS[name]}"></span>'
                    f'<span>{n} tokens in {t:.1f} s</span></div>')
    return f'<div class="live-race" aria-label="the race so far">{"".join(rows)}</div>'


CONFIDENCE_BINS = 10  # the confidence axis cut in tenths for the share kept


def confidence_figure(points: list[tuple[float, bool]], tau: float) -> go.Figure:
    """Each tested draft's confidence (the draft's untempered top probability) against whether it was kept,
    the 0/1 spread a little so that points do not hide each other, with the share kept per tenth of
    confidence and the threshold ``tau`` as a vertical line."""
    def jitter(i: int) -> float:  # the same spread on every redraw
        return ((i * 0.618034) % 1 - 0.5) * 0.3
    fig = go.Figure()
    for kept, name, y, color in ((True, "kept", 1.0, BAR[ACCEPTED]), (False, "rejected", 0.0, BAR[REJECTED])):
        xs = [c for c, k in points if k == kept]
        fig.add_trace(go.Scatter(x=xs, y=[y + jitter(i) for i in range(len(xs))], mode="markers", name=name,
                                 marker=dict(size=6, color=color, opacity=0.55),
                                 hovertemplate=f"confidence %{{x:.2f}}: {name}<extra></extra>"))
    bins = [[k for c, k in points if min(int(c * CONFIDENCE_BINS), CONFIDENCE_BINS - 1) == b]
            for b in range(CONFIDENCE_BINS)]
    centres = [(b + 0.5) / CONFIDENCE_BINS for b, kept in enumerate(bins) if kept]
    shares = [sum(kept) / len(kept) for kept in bins if kept]
    counts = [len(kept) for kept in bins if kept]
    fig.add_trace(go.Scatter(x=centres, y=shares, mode="lines+markers", name="share kept, per tenth of confidence",
                             line_color=INK, customdata=counts,
                             hovertemplate="%{y:.0%} of %{customdata} kept<extra></extra>"))
    fig.add_vline(x=tau, line_dash="dash", line_color=INK, annotation_text=f"τ = {tau:.2f}",
                  annotation_position="top left")
    return _layout(fig, "The draft's confidence against the verdict",
                   subtitle="each tested draft: kept (top) or rejected (bottom), spread a little",
                   xaxis=dict(title="the draft's confidence (its top probability)", range=[0, 1.02]),
                   yaxis=dict(title="kept (share)", range=[-0.2, 1.2], tickvals=[0, 0.5, 1]))


def threshold_figure(replays: list, tau: float) -> go.Figure:
    """Tokens and drafts per round, and the predicted tokens per second, of one run's rounds replayed at
    each threshold (:func:`specdec.teach.theory.replay_threshold`), the chosen ``tau`` marked."""
    taus = [r.tau for r in replays]
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_trace(go.Scatter(x=taus, y=[r.drafted for r in replays], mode="lines", name="drafted per round",
                             line_color=PHASE_COLORS["draft"]))
    fig.add_trace(go.Scatter(x=taus, y=[r.tokens for r in replays], mode="lines", name="tokens per round",
                             line_color=BAR[ACCEPTED]))
    fig.add_trace(go.Scatter(x=taus, y=[r.tokens_per_s for r in replays], mode="lines",
                             name="tok/s (a prediction)", line=dict(color=INK, dash="dot")), secondary_y=True)
    fig.add_vline(x=tau, line_dash="dash", line_color=INK)
    fig.update_yaxes(title_text="per round", rangemode="tozero", secondary_y=False)
    fig.update_yaxes(title_text="tok/s", rangemode="tozero", showgrid=False, secondary_y=True)
    fig = _layout(fig, "This run replayed at each threshold", subtitle="the same rounds, drafting cut after the "
                  "first draft less sure than τ", xaxis_title="threshold τ")
    return fig.update_layout(margin_r=MODEBAR_PX + 40)


WHATIF_DASH = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")
WHATIF_MARK = ("circle", "square", "diamond", "triangle-up", "cross", "x")  # two lines that meet still differ


def whatif_figure(curves: list[tuple[str, list]], here: tuple[float, float]) -> go.Figure:
    """Predicted S(K) per machine (:class:`specdec.teach.whatif.Prediction` per K), each line its own dash so
    that colour is not the only cue, and this machine's measured speed-up of the draft model's run (its
    mean drafts per round, its speed-up) as a star."""
    fig = go.Figure()
    for i, (name, preds) in enumerate(curves):
        fig.add_trace(go.Scatter(x=[p.k for p in preds], y=[p.speedup for p in preds], mode="lines+markers",
                                 name=name, line=dict(dash=WHATIF_DASH[i % len(WHATIF_DASH)], width=2),
                                 marker=dict(symbol=WHATIF_MARK[i % len(WHATIF_MARK)], size=8),
                                 hovertemplate=f"{name}<br>K = %{{x}}: S = %{{y:.2f}}x (predicted)<extra></extra>"))
    fig.add_trace(go.Scatter(x=[here[0]], y=[here[1]], mode="markers", name="this machine, measured in the race",
                             marker=dict(color="#dc2626", size=14, symbol="star"),
                             hovertemplate="measured: %{y:.2f}x at %{x:.2f} drafted a round<extra></extra>"))
    fig.add_hline(y=1.0, line_dash="dot", line_color="#9ca3af", annotation_text="no gain",
                  annotation_position="bottom right")
    return _layout(fig, "Predicted speed-up on other machines", height=360,
                   subtitle="S(K) = E(K) / (K c + v(K)), a from this race; every line a prediction",
                   xaxis=dict(title="K, drafts per round", dtick=1), yaxis=dict(title="speed-up", rangemode="tozero"))
