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
           "time per drafted token in verifier-only steps; identical: the verifier-only output, token for token:", "",
           "| prompt | race | drafter | tokens / round | a | c | decode tok/s | speed-up | identical |",
           "|---|---|---|---:|---:|---:|---:|---:|---|"]
    for r in d["rows"]:
        out.append(f"| {r['prompt']} | {r['race']} | {r['label']} | {r['tokens_per_round']:.2f} | "
                   f"{fmt(r['acceptance'], '%')} | {fmt(r['c'], 'f')} | {r['decode_tok_s']:.2f} | "
                   f"{fmt(r['speedup'], 'x')} | {'yes' if r['identical'] else 'NO'} |")
    return "\n".join(out)


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
    env = environment(pair)
    out = Path(args.out or tiny_pair.default_out("race", env, args.tiny))
    data = {"benchmark": "race", **env, "tiny": args.tiny, "quick": args.quick, "tokens": tokens, "k": args.k,
            "prompts": prompts, "rows": rows}
    write_json(out, data)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
