"""Token trees against the chain at the same depth K: a width x node-budget sweep at T = 0 and
T = 0.8 on code and prose prompts, with the verifier-only baseline, this machine's cost fit and
the shape it predicts best. Writes JSON (and, for the embedded pair, the counts the tree
drafter's default shape is chosen from: ``specdec/decode/tree_shapes.json``).

    python -m benchmarks.trees            # W in 2,3 x N in 8,12,20 and the chain; 4 code + 2 prose prompts x 48 tokens
    python -m benchmarks.trees --quick    # W 2 x N 8, 2 code + 1 prose prompt x 16 tokens
    python -m benchmarks.trees --tiny     # tiny random models: checks the script, measures nothing
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys

from benchmarks import tiny_pair
from benchmarks.common import environment, write_json
from benchmarks.tables import fmt, machine_line
from benchmarks.throughput import CODE, PROSE, geomean
from specdec import DecodeConfig, Generation, SamplingConfig, make_drafter
from specdec.decode.settings import add_model_arguments
from specdec.decode.tree_shape import BUDGETS, CONTEXT, SHAPES_FILE, WIDTHS, measure_costs, predict
from specdec.model.timing import ESTIMATOR

K = 6
TEMPERATURES = {"0": SamplingConfig(0.0), "sampled": SamplingConfig(0.8)}


def run(pair, ids, cfg: DecodeConfig, drafter: str, shape=(0, 0)) -> Generation:
    return Generation(pair, ids, cfg, make_drafter(drafter, pair, tree=shape, cfg=cfg)).run()


def draft_work(g: Generation) -> tuple[int, int]:
    """(draft forwards, draft rows) over a run's rounds: a tree round forwards the root, then one
    batched forward per depth over the nodes it expands; a chain round one row per drafted token."""
    forwards = rows = 0
    for r in g.rounds:
        if r.tree is None:
            forwards += len(r.positions)
            rows += len(r.positions)
            continue
        expanded = {n.parent for n in r.tree.nodes[1:]} - {0}
        depths = {r.tree.nodes[j].depth for j in expanded}
        forwards += 1 + len(depths)
        rows += 1 + len(expanded)
    return forwards, rows


def cell(gens: list[Generation], chain: list[Generation] | None, base: list[Generation]) -> dict:
    rounds = [r for g in gens for r in g.rounds]
    tokens = sum(len(r.emitted) for r in rounds)
    decode_s = sum(g.summary().wall_s - g.prefill_s for g in gens)
    forwards, rows = map(sum, zip(*(draft_work(g) for g in gens)))
    speed = lambda g: g.summary().tokens_per_s  # noqa: E731
    return {"tokens_per_round": tokens / len(rounds), "tok_s": tokens / decode_s,
            "nodes": statistics.fmean(r.drafted for r in rounds), "draft_forwards": forwards / len(rounds),
            "draft_rows": rows / len(rounds), "rounds": len(rounds), "tokens": tokens,
            "speedup_vs_verifier": geomean([speed(g) / speed(b) for g, b in zip(gens, base)]),
            "speedup_vs_chain": geomean([speed(g) / speed(c) for g, c in zip(gens, chain)]) if chain else 1.0,
            "identical_to_verifier": all(g.token_ids == b.token_ids for g, b in zip(gens, base)),
            "verify_ms_per_round": 1e3 * sum(r.times.verify for r in rounds) / len(rounds),
            "draft_ms_per_round": 1e3 * sum(r.times.draft for r in rounds) / len(rounds)}


COMMAND = "python -m benchmarks.trees"


def render(d: dict) -> str:
    """docs/results.md's block for one result: each tree shape against the chain, this machine's
    costs, and the shape they predict best."""
    s, c = d["settings"], d["costs"]
    context = s.get("context", 256)  # results written before the context was recorded timed at 256
    (va, vb), (da, db) = c["verify"], c["draft"]
    out = [f"#### Token trees against the chain: {d['models']['target']} verified, {d['models']['draft']} drafting", "",
           f"{machine_line(d)}. Depth K = {s['k']} for chain and tree, confidence {s['confidence']}, "
           f"{s['max_new_tokens']} new tokens per prompt, " + ", ".join(f"{len(v)} {k}" for k, v in s["prompts"].items())
           + " prompts; T = 0 and T = " + f"{s['temperatures']['sampled']:g}. W = children per expanded node (1: the "
           "chain), N = node budget. Tokens/round is the mean of emitted tokens over rounds; speed-ups are geometric "
           "means over prompts of tok/s ratios; nodes is the mean number of drafted nodes the verifier checked per round.",
           "", f"This machine's costs, fitted on a {context}-token context: verifier {va:.1f} + {vb:.2f} ms per tree row, "
           f"draft {da:.1f} + {db:.2f} ms per row of a batched forward.", "",
           "| T | prompts | W | N | tokens/round | vs chain | nodes | tok/s | speed-up vs chain | vs verifier-only "
           "| identical at T = 0 |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|:---:|"]
    chain = {(x["temperature"], x["kind"]): x for x in d["cells"] if x["width"] == 1}
    for x in d["cells"]:
        base = chain[x["temperature"], x["kind"]]
        t = "0" if x["temperature"] == "0" else f"{s['temperatures']['sampled']:g}"
        out.append(f"| {t} | {x['kind']} | {x['width']} | {x['budget']} | {x['tokens_per_round']:.2f} "
                   f"| {x['tokens_per_round'] / base['tokens_per_round']:.2f}x | {x['nodes']:.1f} | {x['tok_s']:.2f} "
                   f"| {fmt(x['speedup_vs_chain'], 'x')} | {fmt(x['speedup_vs_verifier'], 'x')} "
                   f"| {('yes' if x['identical_to_verifier'] else 'NO') if x['temperature'] == '0' else '–'} |")
    out += ["", "Predicted from these counts and this machine's costs (what `--drafter tree` picks by default):", "",
            "| T | best predicted shape | predicted tok/s | chain predicted |", "|---|---|---:|---:|"]
    for t, shapes in d["shapes"].items():
        best = max(shapes, key=lambda x: x["predicted_tok_s"])
        ch = next(x for x in shapes if x["width"] == 1)
        out.append(f"| {'0' if t == '0' else s['temperatures']['sampled']} | W={best['width']} N={best['budget']} "
                   f"| {best['predicted_tok_s']:.2f} | {ch['predicted_tok_s']:.2f} |")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one tree shape, 3 prompts x 16 tokens")
    ap.add_argument("--tiny", action="store_true", help="tiny random models built in-process (seconds)")
    ap.add_argument("--max-new-tokens", type=int, default=None, help="default 48 (16 with --quick)")
    ap.add_argument("--out", default=None, help="JSON path")
    ap.add_argument("--confidence", type=float, default=DecodeConfig().confidence,
                    help="the adaptive stop of chain and tree alike (default: the default run's)")
    add_model_arguments(ap)
    args = ap.parse_args(argv)
    log = lambda *a: print(*a, file=sys.stderr, flush=True)  # noqa: E731
    n = args.max_new_tokens or (16 if args.quick else 48)
    widths, budgets = ((2,), (8,)) if args.quick else (WIDTHS, BUDGETS)
    kinds = {"code": CODE[:2] if args.quick else CODE[:4], "prose": PROSE[:1] if args.quick else PROSE[:2]}
    if args.tiny:
        pair = tiny_pair.benchmark_pair(lean_forward=True)
        prompts = {kind: [(f"tiny {kind} {i}", tiny_pair.repeating_prompt(i + 10 * j)) for i in range(len(texts))]
                   for j, (kind, texts) in enumerate(kinds.items())}
    else:
        pair, _ = tiny_pair.load(args, [])
        prompts = {kind: [(t, pair.encode(t)) for t in texts] for kind, texts in kinds.items()}
    env = environment(pair)
    run(pair, prompts["code"][0][1], DecodeConfig(max_new_tokens=8, tree_width=2, tree_nodes=8), "tree", (2, 8))  # warm-up
    costs = measure_costs(pair)
    log(f"verifier {costs['verify'][0]:.1f} + {costs['verify'][1]:.2f} ms/row, "
        f"draft {costs['draft'][0]:.1f} + {costs['draft'][1]:.2f} ms/row")

    cells = []
    for tname, sampling in TEMPERATURES.items():
        for kind, ps in prompts.items():
            cfg = DecodeConfig(max_new_tokens=n, k=K, confidence=args.confidence, sampling=sampling, ignore_eos=True)
            base = [run(pair, ids, cfg, "none") for _, ids in ps]
            chain = [run(pair, ids, cfg, "model") for _, ids in ps]
            rows = [{"width": 1, "budget": K, **cell(chain, None, base)}]
            for w in widths:
                for b in budgets:
                    rows.append({"width": w, "budget": b, **cell([run(pair, ids, cfg, "tree", (w, b)) for _, ids in ps],
                                                                  chain, base)})
            for r in rows:
                r.update(temperature=tname, kind=kind, k=K)
                cells.append(r)
                log(f"T={tname:7s} {kind:5s} W={r['width']} N={r['budget']:2d}  tokens/round {r['tokens_per_round']:.2f}"
                    f"  nodes {r['nodes']:.1f}  {r['tok_s']:.2f} tok/s  vs chain {r['speedup_vs_chain']:.2f}"
                    f"  vs verifier {r['speedup_vs_verifier']:.2f}")

    # counts pooled over code and prose per temperature: what the default shape is chosen from
    shapes = {}
    for tname in TEMPERATURES:
        pooled = []
        for w, b in [(1, K)] + [(w, b) for w in widths for b in budgets]:
            mine = [c for c in cells if c["temperature"] == tname and (c["width"], c["budget"]) == (w, b)]
            pooled.append({"k": K, "width": w, "budget": b,
                           **{f: statistics.fmean(c[f] for c in mine)
                              for f in ("tokens_per_round", "nodes", "draft_forwards", "draft_rows")}})
        shapes[tname] = predict(pooled, costs)
    payload = {"benchmark": "trees", **env, "quick": args.quick, "tiny": args.tiny,
               "models": {"target": pair.target_name, "draft": pair.draft_name},
               "settings": {"k": K, "widths": list(widths), "budgets": list(budgets), "max_new_tokens": n,
                            "temperatures": {t: s.temperature for t, s in TEMPERATURES.items()}, "confidence": args.confidence,
                            "context": CONTEXT, "estimator": ESTIMATOR,
                            "prompts": {kind: [label for label, _ in ps] for kind, ps in prompts.items()}},
               "costs": costs, "cells": cells, "shapes": shapes}
    out = args.out or tiny_pair.default_out("trees", env, args.tiny)
    write_json(out, payload)
    log(f"wrote {out}")
    if not (args.tiny or args.quick or args.out):
        SHAPES_FILE.write_text(json.dumps({"pair": [pair.target_name, pair.draft_name], "cpu": env["hardware"]["cpu"],
                                           "commit": env["commit"],
                                           "shapes": {t: [{k: v for k, v in s.items() if not k.startswith("predicted")}
                                                          for s in ss] for t, ss in shapes.items()}}, indent=1))
        log(f"wrote {SHAPES_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
