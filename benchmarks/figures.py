"""The figure notebooks 03 and 05 share, drawn with plotly from specdec's pure functions
(specdec itself never imports plotly; like ``sweep.heatmaps``, it lives in the installed
``benchmarks`` package so that a notebook imports it from any working directory). Names as on
docs/notation.md."""
from __future__ import annotations

import plotly.graph_objects as go

from specdec.teach.style import BASELINE_COLOR, P_COLOR, Q_COLOR
from specdec.teach.theory import round_timeline, tokens_per_round


def timeline_figure(k: int, c: float, v: float, a: float | None = None) -> go.Figure:
    """One round's forwards against plain decoding over the same time (verifier-only steps on the x
    axis): K draft forwards at c each, then one verification of K+1 rows at v(K). With ``a`` the title
    says what the round emits on average, E(a, K), against the plain tokens in the same time."""
    colors = {"draft": Q_COLOR, "verify": P_COLOR, "token": BASELINE_COLOR}  # the draft's, the verifier's, plain
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
        title += (f"<br>it emits E(a, K) = {tokens_per_round(a, k):.2f} tokens on average at a = {a:.2f} (i.i.d.); "
                  f"plain decoding emits {total:.2f} in the same time")
    fig.update_layout(template="plotly_white", height=260, barmode="overlay", xaxis_title="time, in verifier-only steps",
                      yaxis=dict(autorange="reversed"), title=dict(text=title, font_size=14),
                      margin=dict(l=110, t=80))
    return fig
