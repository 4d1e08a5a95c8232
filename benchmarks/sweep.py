"""Acceptance and speedup over the draft length K and the temperature T: a grid of constant-K runs
(confidence 0) of the draft model, each against verifier-only runs at the same temperature on the
same code prompts. Writes JSON and two heatmaps (HTML, and PNG where kaleido is installed).

    python -m benchmarks.sweep            # K in 1,2,3,4,6,8 x T in 0, 0.5, 1; 4 prompts x 64 tokens
    python -m benchmarks.sweep --quick    # K in 1,4 x T in 0, 1; 2 prompts x 24 tokens
    python -m benchmarks.sweep --tiny     # tiny random models: checks the script, measures nothing
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from benchmarks import tiny_pair
from benchmarks.chromium import find_chromium
from benchmarks.common import environment, write_json
from benchmarks.tables import fmt, machine_line
from benchmarks.throughput import CODE, geomean
from specdec import DecodeConfig, Generation, SamplingConfig, make_drafter
from specdec.decode.settings import add_model_arguments
from specdec.trace import ACCEPTED, REJECTED, RunSummary, summarize

KS, TEMPERATURES = (1, 2, 3, 4, 6, 8), (0.0, 0.5, 1.0)
QUICK_KS, QUICK_TEMPERATURES = (1, 4), (0.0, 1.0)


def run(pair, ids: list[int], cfg: DecodeConfig, drafter: str) -> Generation:
    return Generation(pair, ids, cfg, make_drafter(drafter, pair)).run()


def pooled(gens: list[Generation]) -> RunSummary:
    """One summary over several runs, as if their rounds were one run."""
    return summarize([r for g in gens for r in g.rounds], sum(g.prefill_s for g in gens))


def cell(gens: list[Generation], baseline: list[Generation]) -> dict:
    """One (K, T) cell over all prompts: rounds pooled, so acceptance is accepted / drafted over
    every draft; speedup is the geometric mean of per-prompt tok/s ratios against ``baseline``."""
    rounds = [r for g in gens for r in g.rounds]
    s = pooled(gens)
    # beta = sum_v min(p, q): the expected acceptance at a position, free of the coin flips' noise.
    betas = [p.beta for r in rounds for p in r.positions if p.status in (ACCEPTED, REJECTED)]
    return {"acceptance": s.acceptance_rate, "tokens_per_round": s.mean_tokens_per_round,
            "per_position_acceptance": list(s.per_position_acceptance),
            "mean_beta": statistics.fmean(betas) if betas else None, "tok_s": s.tokens_per_s,
            "speedup": geomean([g.summary().tokens_per_s / b.summary().tokens_per_s for g, b in zip(gens, baseline)]),
            "tokens": s.new_tokens, "drafted": s.drafted, "accepted": s.accepted, "rounds": s.rounds,
            "wall_s": s.wall_s}


def heatmaps(cells: list[dict], ks, temperatures, title: str) -> go.Figure:
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.16,
                        subplot_titles=("acceptance (accepted / drafted)", "speedup vs verifier only (tok/s ratio)"))
    at = {(c["k"], c["temperature"]): c for c in cells}
    scales = {"acceptance": dict(zmin=0.0, zmax=1.0, colorscale="Viridis", colorbar=dict(x=0.42)),
              "speedup": dict(zmid=1.0, colorscale="RdBu", colorbar=dict(x=1.0))}
    for col, (key, scale) in enumerate(scales.items(), start=1):
        z = [[at[k, t][key] for k in ks] for t in temperatures]  # (T, K)
        fig.add_trace(go.Heatmap(z=z, x=[str(k) for k in ks], y=[f"T={t:g}" for t in temperatures],
                                 texttemplate="%{z:.2f}", name=key, **scale), row=1, col=col)
    fig.update_xaxes(title_text="K (drafted tokens per round)", type="category")
    fig.update_yaxes(title_text="temperature", type="category")
    fig.update_layout(title=title, template="plotly_white", height=420, width=1000)
    return fig


def write_png(fig: go.Figure, path: Path) -> str | None:
    """Write ``path``; None if written, else why not."""
    try:
        import kaleido  # noqa: F401
    except ImportError as e:
        return f"kaleido is not installed ({e})"
    chromium = find_chromium()
    if chromium:  # kaleido drives a Chrome; point it at the one the browser tests use
        os.environ.setdefault("BROWSER_PATH", chromium)
    try:
        fig.write_image(path)
    except Exception as e:  # kaleido fails in many ways (no Chrome, a timeout): record it, keep the JSON
        return f"kaleido could not render: {type(e).__name__}: {e}"
    return None


COMMAND = "python -m benchmarks.sweep"


def render(d: dict) -> str:
    """docs/results.md's block for one sweep result: acceptance, β, tokens per round and speed-up
    over K x T, and the heatmaps."""
    s, at = d["settings"], {(c["k"], c["temperature"]): c for c in d["cells"]}
    out = [f"#### Acceptance and speedup over K x T: {d['models']['target']} verified, {d['models']['draft']} "
           f"drafting", "", f"{machine_line(d)}. Constant K (confidence {s['confidence']}), {len(s['prompts'])} code "
           f"prompts x {s['max_new_tokens']} new tokens, seed {s['seed']}. Verifier-only: "
           + ", ".join(f"{tok_s:.2f} tok/s at T = {t}" for t, tok_s in d["baseline_tok_s"].items()) + "."]
    tables = [("acceptance", "accepted / drafted, over all rounds", "%"),
              ("mean_beta", "β, the mean Σ min(p, q) over tested positions: the expected acceptance, free of the "
                            "coin flips' noise", "f"),
              ("tokens_per_round", "tokens per round (accepted + 1, the resampled or bonus token)", "f"),
              ("speedup", "speedup: geometric mean over prompts of tok/s against verifier-only at the same T", "x")]
    for key, title, kind in tables:
        out += ["", f"*{title}*", "", "| T | " + " | ".join(f"K = {k}" for k in s["ks"]) + " |",
                "|---|" + "---:|" * len(s["ks"])]
        out += [f"| {t:g} | " + " | ".join(fmt(at[k, t][key], kind) for k in s["ks"]) + " |"
                for t in s["temperatures"]]
    fig = d["figures"]
    out += ["", f"Heatmaps: [{fig['html']}](../benchmarks/results/{fig['html']}) (interactive)"
                + (f", and below.\n\n![acceptance and speedup heatmaps](../benchmarks/results/{fig['png']})"
                   if fig.get("png") else f"; no PNG ({fig.get('png_why_not')}).")]
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="K in 1,4 x T in 0,1; 2 prompts x 24 tokens")
    ap.add_argument("--tiny", action="store_true", help="tiny random models built in-process (seconds)")
    ap.add_argument("--max-new-tokens", type=int, default=None, help="default 64 (24 with --quick)")
    ap.add_argument("--out", default=None, help="JSON path; the heatmaps go next to it")
    add_model_arguments(ap)
    args = ap.parse_args(argv)
    ks, temperatures = (QUICK_KS, QUICK_TEMPERATURES) if args.quick else (KS, TEMPERATURES)
    n = args.max_new_tokens or (24 if args.quick else 64)
    log = lambda *a: print(*a, file=sys.stderr, flush=True)  # noqa: E731
    pair, prompts = tiny_pair.load(args, CODE[:2] if args.quick else CODE[:4])
    env = environment(pair)
    run(pair, prompts[0][1], DecodeConfig(max_new_tokens=8), "model")  # warm-up, not measured

    cells, baseline = [], {}
    for t in temperatures:
        sampling = SamplingConfig(temperature=t)
        base = [run(pair, ids, DecodeConfig(max_new_tokens=n, sampling=sampling), "none") for _, ids in prompts]
        baseline[f"{t:g}"] = pooled(base).tokens_per_s
        log(f"T={t:g}  verifier only            {baseline[f'{t:g}']:7.2f} tok/s")
        for k in ks:
            cfg = DecodeConfig(max_new_tokens=n, k=k, confidence=0.0, sampling=sampling)
            c = {"k": k, "temperature": t,
                 **cell([run(pair, ids, cfg, "model") for _, ids in prompts], base)}
            cells.append(c)
            log(f"T={t:g}  K={k}  acceptance {c['acceptance']:.2f}  {c['tok_s']:7.2f} tok/s  "
                f"speedup {c['speedup']:.2f}")

    out = Path(args.out or tiny_pair.default_out("sweep", env, args.tiny))
    out.parent.mkdir(parents=True, exist_ok=True)
    fig = heatmaps(cells, ks, temperatures, f"{pair.target_name} verified, {pair.draft_name} drafting; "
                                            f"{env['hardware']['cpu']}, {env['precision']}")
    html, png = out.with_suffix(".html"), out.with_suffix(".png")
    # plotly.js from its CDN: a 10 kB file to commit instead of 4.8 MB; the PNG is the offline view
    fig.write_html(html, include_plotlyjs="cdn")
    png_why_not = write_png(fig, png)
    write_json(out, {"benchmark": "sweep", **env, "quick": args.quick, "tiny": args.tiny,
                     "models": {"target": pair.target_name, "draft": pair.draft_name},
                     "settings": {"ks": list(ks), "temperatures": list(temperatures), "confidence": 0.0,
                                  "max_new_tokens": n, "seed": DecodeConfig().seed,
                                  "prompts": [label for label, _ in prompts]},
                     "baseline_tok_s": baseline, "cells": cells,
                     "figures": {"html": html.name, "png": None if png_why_not else png.name,
                                 "png_why_not": png_why_not}})
    log(f"wrote {out} and {html.name}" + ("" if png_why_not else f" and {png.name}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
