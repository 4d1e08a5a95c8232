"""Plotly figures for the app, built from trace records and the plain data of ``specdec.render``.

Every legend entry means one thing (one trace per meaning, never a per-bar colour list), every
axis has a title, and a value of zero is drawn as such rather than as a missing bar.
"""
from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from specdec.render import PHASE_NAMES, round_stats, theory_tokens_per_round
from specdec.trace import ACCEPTED, BONUS, PHASES, PLAIN, REJECTED, RESAMPLED, UNREACHED, RoundTrace

# One colour per kind of token, shared by the charts and the token CSS (layout.CSS).
COLORS = {ACCEPTED: "#86efac", REJECTED: "#fca5a5", RESAMPLED: "#fcd34d", BONUS: "#93c5fd", PLAIN: "#e5e7eb"}
BAR = {ACCEPTED: "#16a34a", REJECTED: "#dc2626", UNREACHED: "#9ca3af"}  # saturated, for bars on white
P_COLOR, Q_COLOR, RESIDUAL_COLOR = "#ea580c", "#2563eb", "#a16207"
PHASE_COLORS = {"draft": "#60a5fa", "verify": "#f97316", "accept": "#a855f7", "rollback": "#10b981", "other": "#9ca3af"}


def _layout(fig: go.Figure, title: str, height: int = 340, subtitle: str = "", **kw) -> go.Figure:
    """Title (and a subtitle line) on top, legend below the plot: nothing overlaps on a narrow screen."""
    text = title + (f"<br><sup>{subtitle}</sup>" if subtitle else "")
    fig.update_layout(title=dict(text=text, font=dict(size=14), y=0.97, x=0.01, yanchor="top"), height=height,
                      template="plotly_white", margin=dict(l=60, r=20, t=70 if subtitle else 50, b=40), **kw)
    fig.update_layout(legend=dict(orientation="h", x=0, y=-0.22, yanchor="top", font=dict(size=11)))
    fig.update_layout(margin_b=110)
    return fig


def _label(text: str) -> str:
    """A token as an axis label: quoted, whitespace made visible, short."""
    shown = text.replace(" ", "·").replace("\n", "↵").replace("\t", "→")
    return repr(shown if len(shown) <= 12 else shown[:11] + "…")


def ratio_figure(rounds: list[RoundTrace]) -> go.Figure:
    """min(1, p/q) per drafted token, one bar trace per verdict, and the draws u as markers: a
    token is kept exactly when its u marker is at or below the top of its bar."""
    single = len(rounds) == 1
    by_status = {s: ([], [], []) for s in (ACCEPTED, REJECTED, UNREACHED)}  # x, y, hover
    zero_x, u_x, u_y, labels, n = [], [], [], [], 0
    for r in rounds:
        for i, pos in enumerate(r.positions):
            if pos.status not in by_status:  # after a stop token: never emitted, nothing to test
                continue
            n += 1
            x = n
            labels.append(f"{i + 1}: {_label(pos.text)}")
            xs, ys, hover = by_status[pos.status]
            xs.append(x)
            ys.append(min(1.0, pos.ratio))
            hover.append(f"round {r.index + 1}, position {i + 1}: {pos.text!r}<br>p = {pos.p:.4f}, q = {pos.q:.4f}, "
                         f"p/q = {pos.ratio:.3f}, u = {pos.u:.3f}: {pos.status.replace('unreached', 'not tested')}")
            if pos.ratio == 0:
                zero_x.append(x)
            if pos.status != UNREACHED:
                u_x.append(x)
                u_y.append(pos.u)
    names = {ACCEPTED: "kept (u ≤ p/q)", REJECTED: "rejected (u > p/q)", UNREACHED: "not tested (after a rejection)"}
    fig = go.Figure([go.Bar(x=xs, y=ys, name=names[s], marker_color=BAR[s], hovertext=hover, hoverinfo="text")
                     for s, (xs, ys, hover) in by_status.items() if xs])
    if zero_x:  # a bar of height 0 is invisible: mark p/q = 0 explicitly
        fig.add_trace(go.Scatter(x=zero_x, y=[0] * len(zero_x), mode="markers", name="p/q = 0 (verifier: impossible)",
                                 marker=dict(symbol="x-thin-open", size=14, color=BAR[REJECTED], line_width=3),
                                 hoverinfo="skip"))
    fig.add_trace(go.Scatter(x=u_x, y=u_y, name="draw u", mode="markers", hoverinfo="skip",
                             marker=dict(color="#111827", size=8, symbol="diamond")))
    fig.add_hline(y=1.0, line_dash="dash", line_color="#15803d", annotation_text="p ≥ q: always kept",
                  annotation_position="top left")
    xaxis = (dict(tickmode="array", tickvals=list(range(1, n + 1)), ticktext=labels) if single else
             dict(title="drafted token, in order (hover for round and position)", tickmode="auto", nticks=12))
    if single:
        xaxis["title"] = "drafted token"
    return _layout(fig, "Acceptance test per drafted token: kept iff u ≤ p/q", barmode="overlay",
                   yaxis=dict(range=[0, 1.12], title="min(1, p/q) and u"), xaxis=xaxis)


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
        fig = go.Figure([go.Bar(x=[_label(t.text) for t in top], y=[t.prob for t in top], name="p (verifier)",
                                marker_color=P_COLOR)])
        if chosen is not None and chosen in [t.token_id for t in top]:
            _highlight(fig, [t.token_id for t in top].index(chosen), "drawn")
        if r.next_kind == BONUS:
            title = f"All {r.drafted} drafts kept: bonus token {r.next_token.text!r} drawn from p at the next position"
        elif r.next_kind == PLAIN:
            title = f"Nothing drafted: {r.next_token.text!r} drawn from p, as plain decoding does"
        else:
            title = f"The kept drafts end with the stop token {r.positions[r.n_accepted - 1].text!r}"
        return _layout(fig, title, yaxis=dict(range=[0, 1.05], title="probability"), xaxis=dict(title="token"))
    pos = r.positions[i]
    cands = list(pos.candidates)
    xs = [_label(c.text) for c in cands]
    mass = max(1.0 - pos.beta, 1e-12)  # the residual's total mass before normalising: 1 - sum min(p, q)
    residual = [max(0.0, c.p - c.q) / mass for c in cands]
    fig = go.Figure([
        go.Bar(x=xs, y=[c.p for c in cands], name="p (verifier)", marker_color=P_COLOR),
        go.Bar(x=xs, y=[c.q for c in cands], name="q (draft)", marker_color=Q_COLOR),
        go.Scatter(x=xs, y=residual, name="residual norm(max(0, p − q))", mode="markers+lines",
                   line=dict(color=RESIDUAL_COLOR, dash="dot", width=2), marker=dict(size=10, symbol="star")),
    ])
    _highlight(fig, [c.token_id for c in cands].index(pos.token_id), f"drafted x, p/q = {pos.ratio:.2f}")
    title = f"Position {i + 1}: drafted {pos.text!r} rejected; {r.next_token.text!r} drawn from the residual"
    subtitle = f"β = Σ min(p, q) = {pos.beta:.2f}: the chance that a draft from q is kept here"
    return _layout(fig, title, subtitle=subtitle, barmode="group", yaxis=dict(range=[0, 1.12], title="probability"),
                   xaxis=dict(title="token (the top of p and of q, and the drafted x)"), height=400)


def _highlight(fig: go.Figure, index: int, label: str) -> None:
    fig.add_vrect(x0=index - 0.5, x1=index + 0.5, fillcolor="#fde68a", opacity=0.45, line_width=0, layer="below",
                  annotation_text=label, annotation_position="top", annotation_font_size=11)


def timing_figure(rounds: list[RoundTrace]) -> go.Figure:
    xs = [r.index + 1 for r in rounds]
    fig = go.Figure([go.Bar(x=xs, y=[1000 * getattr(r.times, ph) for r in rounds], name=PHASE_NAMES[ph],
                            marker_color=PHASE_COLORS[ph]) for ph in PHASES])
    return _layout(fig, "Time per round by phase (this session's compute)", barmode="stack",
                   xaxis_title="round", yaxis_title="milliseconds")


def acceptance_figure(rounds: list[RoundTrace]) -> go.Figure:
    s = round_stats(rounds)
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_trace(go.Bar(x=s.rounds, y=s.accepted, name="drafts kept", marker_color=BAR[ACCEPTED],
                         hovertemplate="round %{x}: %{y} kept"))
    fig.add_trace(go.Bar(x=s.rounds, y=[d - a for d, a in zip(s.drafted, s.accepted)], name="drafts not kept",
                         marker_color=BAR[UNREACHED], hovertemplate="round %{x}: %{y} not kept"))
    fig.add_trace(go.Scatter(x=s.rounds, y=s.running_a, name="running a = kept / tested", mode="lines+markers",
                             line_color="#111827"), secondary_y=True)
    fig.update_yaxes(title_text="drafted tokens", range=[0, max(s.k, 1) + 0.5], secondary_y=False)
    fig.update_yaxes(title_text="a", range=[0, 1.05], secondary_y=True)
    return _layout(fig, "Drafts kept per round, and the running acceptance a", barmode="stack", xaxis_title="round")


def tokens_per_round_figure(rounds: list[RoundTrace]) -> go.Figure:
    s = round_stats(rounds)
    k = max(s.k, 1)
    grid = [i / 50 for i in range(51)]
    fig = go.Figure([go.Scatter(x=grid, y=[theory_tokens_per_round(a, k) for a in grid], mode="lines",
                                name=f"theory (1 − a^{k + 1}) / (1 − a)", line_color="#6b7280")])
    if rounds:
        fig.add_trace(go.Scatter(x=s.running_a, y=s.running_tokens, mode="lines+markers", name="measured, by round",
                                 line=dict(color="#2563eb", width=1), marker=dict(size=5)))
        fig.add_trace(go.Scatter(x=s.running_a[-1:], y=s.running_tokens[-1:], mode="markers", name="now",
                                 marker=dict(color="#dc2626", size=12)))
    return _layout(fig, "Mean tokens per round against the theory", xaxis_title="acceptance a (kept / tested)",
                   yaxis_title="tokens per round", xaxis=dict(range=[0, 1]), yaxis=dict(range=[0, k + 1.2]))


def race_figure(runs: dict[str, list[RoundTrace]]) -> go.Figure:
    """Tokens generated against elapsed time (prefill included) for each named run."""
    fig = go.Figure()
    for name, rounds in runs.items():
        ts, ns, n = [0.0], [0], 0
        for r in rounds:
            n += len(r.emitted)
            ts.append(r.elapsed)
            ns.append(n)
        fig.add_trace(go.Scatter(x=ts, y=ns, mode="lines+markers", name=name, line_shape="hv"))
    return _layout(fig, "Tokens generated against this session's compute time", xaxis_title="seconds",
                   yaxis_title="tokens")
