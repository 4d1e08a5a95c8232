"""Plotly figures for the app, built from trace records and the plain data of ``specdec.render``."""
from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from specdec.render import PHASE_NAMES, round_stats, theory_tokens_per_round
from specdec.trace import ACCEPTED, AFTER_STOP, BONUS, PHASES, PLAIN, REJECTED, RESAMPLED, UNREACHED, RoundTrace

# One colour per kind of token, shared by the charts and the token CSS (layout.CSS).
COLORS = {ACCEPTED: "#86efac", REJECTED: "#fca5a5", RESAMPLED: "#fcd34d", BONUS: "#93c5fd", PLAIN: "#e5e7eb"}

STATUS_COLORS = {ACCEPTED: COLORS[ACCEPTED], REJECTED: COLORS[REJECTED], UNREACHED: "#d1d5db", AFTER_STOP: "#d1d5db"}
PHASE_COLORS = {"draft": "#60a5fa", "verify": "#f97316", "accept": "#a855f7", "rollback": "#10b981", "other": "#9ca3af"}


def _layout(fig: go.Figure, title: str, height: int = 300, **kw) -> go.Figure:
    fig.update_layout(title=dict(text=title, font=dict(size=14), y=0.98), height=height, template="plotly_white",
                      margin=dict(l=50, r=20, t=70, b=40), **kw)
    fig.update_layout(legend=dict(orientation="h", x=0, y=1.0, yanchor="bottom", font=dict(size=11)))
    return fig


def ratio_figure(rounds: list[RoundTrace]) -> go.Figure:
    """min(1, p/q) per drafted position as bars coloured by verdict, the draws u as markers:
    a token is kept exactly when its marker is at or below the top of its bar."""
    xs, ratios, us, colors, hover = [], [], [], [], []
    for r in rounds:
        for i, pos in enumerate(r.positions):
            xs.append(f"r{r.index + 1}.{i + 1}" if len(rounds) > 1 else f"{i + 1}: {pos.text!r}")
            ratios.append(min(1.0, pos.ratio))
            us.append(pos.u if pos.status != UNREACHED else None)
            colors.append(STATUS_COLORS[pos.status])
            hover.append(f"{pos.text!r} {pos.status}<br>p={pos.p:.4f} q={pos.q:.4f} p/q={pos.ratio:.3f} u={pos.u:.3f}")
    fig = go.Figure([
        go.Bar(x=xs, y=ratios, name="min(1, p/q)", marker_color=colors, hovertext=hover, hoverinfo="text"),
        go.Scatter(x=xs, y=us, name="draw u", mode="markers", marker=dict(color="black", size=8, symbol="diamond")),
    ])
    fig.add_hline(y=1.0, line_dash="dash", line_color="#16a34a", annotation_text="p/q >= 1: always kept",
                  annotation_position="top left")
    return _layout(fig, "Acceptance test per drafted token: kept iff u <= p/q", yaxis=dict(range=[0, 1.1]),
                   xaxis=dict(type="category"))


def distribution_figure(r: RoundTrace) -> go.Figure:
    """Top entries of p, q and the residual at the rejected position, or of p for the bonus token."""
    if r.next_kind is None:  # a stop token among the kept drafts ended the output
        pos = r.positions[r.n_accepted - 1]
        panels = [("p (verifier) at the stop token", pos.target_top, COLORS[ACCEPTED])]
        title = f"Stop token {pos.text!r} kept: the output ends there"
    elif r.rejected_at is None:
        panels = [("p (verifier), next position", r.next_top, COLORS[r.next_kind])]
        title = (f"Bonus token {r.next_token.text!r} drawn from p" if r.next_kind == BONUS
                 else f"{r.next_token.text!r} drawn from p (nothing was drafted)")
    else:
        pos = r.positions[r.rejected_at]
        panels = [("p (verifier)", pos.target_top, "#f97316"), ("q (draft)", pos.draft_top, "#60a5fa"),
                  ("residual norm(max(0, p - q))", r.next_top, COLORS[RESAMPLED])]
        title = f"Position {r.rejected_at + 1}: {pos.text!r} rejected, {r.next_token.text!r} resampled"
    fig = make_subplots(rows=1, cols=len(panels), subplot_titles=[p[0] for p in panels])
    for col, (name, top, color) in enumerate(panels, 1):
        fig.add_trace(go.Bar(x=[repr(t.text) for t in top], y=[t.prob for t in top], name=name,
                             marker_color=color, showlegend=False), row=1, col=col)
        fig.update_yaxes(range=[0, 1], row=1, col=col)
    fig.update_annotations(font_size=12)
    return _layout(fig, title)


def timing_figure(rounds: list[RoundTrace]) -> go.Figure:
    xs = [r.index + 1 for r in rounds]
    fig = go.Figure([go.Bar(x=xs, y=[1000 * getattr(r.times, ph) for r in rounds], name=PHASE_NAMES[ph],
                            marker_color=PHASE_COLORS[ph]) for ph in PHASES])
    return _layout(fig, "Time per round by phase", barmode="stack", xaxis_title="round", yaxis_title="ms")


def acceptance_figure(rounds: list[RoundTrace]) -> go.Figure:
    s = round_stats(rounds)
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_trace(go.Bar(x=s.rounds, y=s.accepted, name="drafts kept", marker_color=COLORS[ACCEPTED],
                         customdata=s.drafted, hovertemplate="round %{x}: %{y} of %{customdata} kept"))
    fig.add_trace(go.Scatter(x=s.rounds, y=s.running_a, name="running acceptance a", mode="lines+markers",
                             line_color="#111827"), secondary_y=True)
    fig.update_yaxes(title_text="kept", range=[0, max(s.k, 1) + 0.5], secondary_y=False)
    fig.update_yaxes(title_text="a", range=[0, 1.05], secondary_y=True)
    return _layout(fig, "Drafts kept per round and running acceptance a", xaxis_title="round")


def tokens_per_round_figure(rounds: list[RoundTrace]) -> go.Figure:
    s = round_stats(rounds)
    k = max(s.k, 1)
    grid = [i / 50 for i in range(51)]
    fig = go.Figure([go.Scatter(x=grid, y=[theory_tokens_per_round(a, k) for a in grid], mode="lines",
                                name=f"theory (1 - a^{k + 1}) / (1 - a)", line_color="#9ca3af")])
    if rounds:
        fig.add_trace(go.Scatter(x=s.running_a, y=s.running_tokens, mode="lines+markers", name="measured, by round",
                                 line=dict(color="#2563eb", width=1), marker=dict(size=5)))
        fig.add_trace(go.Scatter(x=s.running_a[-1:], y=s.running_tokens[-1:], mode="markers", name="now",
                                 marker=dict(color="#dc2626", size=12)))
    return _layout(fig, "Mean tokens per round vs theory", xaxis_title="acceptance a", yaxis_title="tokens / round",
                   xaxis=dict(range=[0, 1]), yaxis=dict(range=[0, k + 1.2]))


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
    return _layout(fig, "Tokens generated vs elapsed time", xaxis_title="seconds", yaxis_title="tokens")
