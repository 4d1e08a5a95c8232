"""Every family of drafts on one verifier: the drafters' race (:mod:`specdec.teach.race`) on three
prompts, fresh code, an edit of code already in the prompt, and prose, written as JSON with the machine.

Each prompt is raced twice: the first race with the suffix tree's pool empty (nothing from earlier runs),
the second after it (the pool then holds the first race's verifier-only output: a second run of the same
task). Every row's numbers are defined in :mod:`specdec.teach.race`; speeds are decode only (the prefill
excluded), each drafter's over the verifier-only run of its own race.

    python -m benchmarks.race             # 3 prompts x 128 tokens, two races each
    python -m benchmarks.race --quick     # 3 prompts x 48 tokens
    python -m benchmarks.race --tiny      # tiny random models: checks the script, measures nothing
"""
from __future__ import annotations

import argparse
from dataclasses import asdict
from pathlib import Path

import torch

from benchmarks import tiny_pair
from benchmarks.common import cpu_id, environment, write_json
from benchmarks.tables import fmt
from specdec import DecodeConfig
from specdec.decode.suffix import session_pool
from specdec.teach.race import RACERS, race

PROMPTS = {
    "code": "Write a Python function that merges two sorted lists into one sorted list.",
    "edit": ("Rename the variable `x` to `total` in this function and return the full code:\n\n"
             "def add_all(items):\n    x = 0\n    for item in items:\n        x = x + item\n    return x\n"),
    "prose": "Explain in three sentences why the sky is blue.",
}


COMMAND = "python -m benchmarks.race"


def render(d: dict) -> str:
    """docs/results.md's block: a row per prompt, race and drafter (the definitions: specdec.teach.race)."""
    hw = d["hardware"]
    out = [f"#### The drafters' race on {cpu_id(hw)} ({', '.join(hw['cpu_flags'])}), commit `{d['commit']}`", "",
           f"Greedy, K = {d['k']}, {d['tokens']} new tokens at most; each prompt raced twice, first with the suffix "
           "tree's pool empty, then holding the first race's output (a second run of the same task). Decode tok/s "
           "(the prefill excluded) and speed-up over that race's verifier-only run; a = kept / tested; c = drafting "
           "time per drafted token in verifier-only steps; identical: the verifier-only output, token for token; "
           "predicted here: the speed-up this machine's timed forwards predict for the row's drafted and tokens per "
           "round (specdec.teach.whatif; the draft model and the copying drafters):", "",
           "| prompt | race | drafter | tokens / round | a | c | decode tok/s | speed-up | predicted here | identical |",
           "|---|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in d["rows"]:
        out.append(f"| {r['prompt']} | {r['race']} | {r['label']} | {r['tokens_per_round']:.2f} | "
                   f"{fmt(r['acceptance'], '%')} | {fmt(r['c'], 'f')} | {r['decode_tok_s']:.2f} | "
                   f"{fmt(r['speedup'], 'x')} | {fmt(r.get('predicted_here'), 'x')} | "
                   f"{'yes' if r['identical'] else 'NO'} |")
    if d.get("whatif"):
        out += ["", f"What if the draft model's first race ran elsewhere (every number a prediction but E(K), from "
                f"the race's per-position acceptance; machines and sources: specdec/teach/whatif.py), K = {d['k']}:", "",
                "| prompt | machine | t_v(1) | c | v(K) | E(K) | S(K) |", "|---|---|---:|---:|---:|---:|---:|"]
        out += [f"| {w['prompt']} | {w['machine']} | {w['step_ms']:.1f} ms | {w['c']:.2f} | {w['v']:.2f} | "
                f"{w['tokens']:.2f} | {w['speedup']:.2f}x |" for w in d["whatif"]]
    return "\n".join(out)


def predictions(pair, rows: list[dict], k: int) -> list[dict]:
    """Each row's speed-up as this machine's timed costs predict it (``predicted_here``, set on the row where
    :func:`specdec.teach.whatif.predict_row_here` can), and S(k) on every what-if machine from each first
    race's draft-model run (its per-position acceptance)."""
    from specdec.decode.pacing import RoundCosts
    from specdec.decode.tree_shape import machine_costs
    from specdec.teach import whatif
    costs = RoundCosts.of_machine(machine_costs(pair))
    sizes = whatif.model_size(pair.target), whatif.model_size(pair.draft)
    out = []
    for r in rows:
        r["predicted_here"] = whatif.predict_row_here(costs, r["drafter"], r["drafted_per_round"], r["tokens_per_round"])
        if r["drafter"] == "model" and r["race"] == "first":
            a = whatif.per_position(tuple(map(tuple, r["per_position"])))
            for p in [whatif.predict_here(costs, a, k)] + [whatif.predict(m, *sizes, a, k) for m in whatif.MACHINES]:
                out.append({"prompt": r["prompt"], **asdict(p)})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="48 tokens a run")
    ap.add_argument("--tiny", action="store_true", help="tiny random models: checks the script, measures nothing")
    ap.add_argument("--k", type=int, default=DecodeConfig().k)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    tokens = 8 if args.tiny else 48 if args.quick else 128
    if args.tiny:
        pair = tiny_pair.benchmark_pair(lean_forward=True)
        prompts = {name: " ".join(f"w{i % 7}" for i in range(12)) for name in PROMPTS}
    else:
        from specdec.weights.loading import load_pair
        pair, prompts = load_pair(device="cpu"), PROMPTS
    cfg = DecodeConfig(k=args.k, max_new_tokens=tokens)
    pool = session_pool(pair.target_name)
    rows = []
    with torch.inference_mode():
        for name, prompt in prompts.items():
            pool.clear()  # each prompt starts from an empty pool: only its own first race feeds the second
            for attempt in ("first", "second"):
                result = race(pair, prompt, cfg, RACERS, chat=not args.tiny)
                for r in result.rows:
                    row = {k: v for k, v in r.to_dict().items() if k not in ("pieces", "text")}
                    rows.append({"prompt": name, "race": attempt, **row})
                    print(f"{name:6s} {attempt:6s} {r.label:28s} {r.tokens_per_round:5.2f} tok/round  a "
                          f"{'-' if r.acceptance is None else f'{r.acceptance:.2f}'}  c "
                          f"{'-' if r.c is None else f'{r.c:.2f}'}  {r.decode_tok_s:6.2f} tok/s  {r.speedup:.2f}x  "
                          f"identical {r.identical}", flush=True)
    pool.clear()
    whatif = predictions(pair, rows, args.k)
    env = environment(pair)
    out = Path(args.out or tiny_pair.default_out("race", env, args.tiny))
    data = {"benchmark": "race", **env, "tiny": args.tiny, "quick": args.quick, "tokens": tokens, "k": args.k,
            "prompts": prompts, "rows": rows, "whatif": whatif}
    write_json(out, data)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
