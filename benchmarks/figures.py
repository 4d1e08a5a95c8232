"""The figures notebooks 01, 03 and 05 share, drawn with plotly from specdec's pure functions
(specdec itself never imports plotly; like ``sweep.heatmaps``, they live in the installed
``benchmarks`` package so that a notebook imports them from any working directory). Names as on
docs/notation.md."""
from __future__ import annotations

import plotly.graph_objects as go

from specdec.experiment import overlap
from specdec.theory import round_timeline, tokens_per_round

P_COLOR, Q_COLOR, SHARED, RESIDUAL, EXCESS = "#2563eb", "#ea580c", "#16a34a", "#7c3aed", "#dc2626"


def overlap_figure(p, q, labels=None) -> go.Figure:
    """p and q overlaid as outlines; each token's bar split into min(p, q) (kept: its total is β) and
    the part of p above q (the residual, which the resample fills), with q's excess over p drawn on top."""
    shared, residual, excess, beta = overlap(p, q)
    xs = labels or [f"token {i}" for i in range(len(p))]
    fig = go.Figure([
        go.Bar(x=xs, y=shared.tolist(), name=f"min(p, q): kept drafts, Σ = β = {beta:.2f}", marker_color=SHARED),
        go.Bar(x=xs, y=residual.tolist(), name=f"max(0, p − q): the residual, Σ = 1 − β = {1 - beta:.2f}",
               marker_color=RESIDUAL),
        go.Bar(x=xs, y=excess.tolist(), name="max(0, q − p): drafted too often, rejected", marker_color=EXCESS,
               opacity=0.35),
        go.Scatter(x=xs, y=p.tolist(), mode="markers", name="p (verifier)",
                   marker=dict(symbol="line-ew-open", size=34, color=P_COLOR, line=dict(width=3))),
        go.Scatter(x=xs, y=q.tolist(), mode="markers", name="q (draft)",
                   marker=dict(symbol="line-ew-open", size=34, color=Q_COLOR, line=dict(width=3, dash="dot"))),
    ])
    fig.update_layout(barmode="stack", template="plotly_white", height=420, yaxis_title="probability",
                      legend=dict(orientation="h", y=-0.2),
                      title="Where p and q overlap: min(p, q) is kept, p above q is resampled")
    return fig


def timeline_figure(k: int, c: float, v: float, a: float | None = None) -> go.Figure:
    """One round's forwards against plain decoding over the same time (verifier-only steps on the x
    axis): K draft forwards at c each, then one verification of K+1 rows at v(K). With ``a`` the title
    says what the round emits on average, E(a, K), against the plain tokens in the same time."""
    colors = {"draft": Q_COLOR, "verify": P_COLOR, "token": "#6b7280"}
    fig = go.Figure()
    for lane, label, start, width in round_timeline(k, c, v):
        kind = label.split()[0]
        fig.add_trace(go.Bar(y=[lane], x=[width], base=[start], orientation="h", text=[label],
                             textposition="inside", insidetextanchor="middle", showlegend=False,
                             marker=dict(color=colors[kind], line=dict(color="white", width=2)),
                             hovertext=f"{label}: {width:.2f} steps", hoverinfo="text"))
    total = k * c + v
    title = f"One round: K = {k} drafts at c = {c:.2f} each, then v(K) = {v:.2f}: {total:.2f} verifier-only steps"
    if a is not None:
        title += (f"<br>it emits E(a, K) = {tokens_per_round(a, k):.2f} tokens on average at a = {a:.2f}; "
                  f"plain decoding emits {total:.2f} in the same time")
    fig.update_layout(template="plotly_white", height=260, barmode="overlay", xaxis_title="time, in verifier-only steps",
                      yaxis=dict(autorange="reversed"), title=dict(text=title, font_size=14),
                      margin=dict(l=110, t=80))
    return fig
