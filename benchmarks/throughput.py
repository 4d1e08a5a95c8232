"""Throughput on the embedded pair: verifier-only greedy vs our speculative decoding vs
transformers' assisted generation (``generate(assistant_model=...)``), same prompts and settings,
one process. Writes JSON; ``benchmarks/report.py`` turns it into the README table.

    python benchmarks/throughput.py --dtype bfloat16 --k 4 --max-new-tokens 64
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import ROOT, environment, write_json  # noqa: E402
from specdec import GenerationConfig, load_pair, start  # noqa: E402

PROMPTS = [
    "Write a Python function that returns the n-th Fibonacci number.",
    "Write a Python class for a stack with push, pop and peek.",
    "Write a Python function that merges two sorted lists into one sorted list.",
    "Explain in three sentences why the sky is blue.",
]


def ours(pair, prompt, cfg, drafter):
    gen = start(pair, prompt, cfg, drafter).run()
    s = gen.summary()
    return {"tokens": s.new_tokens, "wall_s": s.wall_s, "tok_s": s.tokens_per_s, "rounds": s.rounds,
            "target_forwards": s.target_forwards, "drafted": s.drafted, "accepted": s.accepted,
            "acceptance": s.acceptance_rate,
            "tokens_per_round": s.mean_tokens_per_round, "overhead_share": s.overhead_share,
            "phase_totals": s.phase_totals, "token_ids": gen.token_ids}


@torch.inference_mode()
def hf(pair, prompt, cfg, assisted: bool):
    ids = torch.tensor([pair.encode(prompt)], device=pair.device)
    kwargs = {"assistant_model": pair.draft} if assisted else {}
    t0 = time.perf_counter()
    out = pair.target.generate(ids, max_new_tokens=cfg.max_new_tokens, do_sample=False,
                               eos_token_id=sorted(pair.stop_ids), pad_token_id=pair.tokenizer.pad_token_id,
                               **kwargs)
    wall = time.perf_counter() - t0
    new = out[0, ids.shape[1]:].tolist()
    return {"tokens": len(new), "wall_s": wall, "tok_s": len(new) / wall, "token_ids": new}


def summarize_runs(rows: list[dict], methods: list[str]) -> dict:
    """Per method over all prompts: total tokens / total wall time, speedup against verifier-only,
    and, for our speculative runs, acceptance = accepted / drafted over all rounds."""
    base = [r for r in rows if r["method"] == methods[0]]
    base_rate = sum(r["tokens"] for r in base) / sum(r["wall_s"] for r in base)
    summary = {}
    for name in methods:
        sel = [r for r in rows if r["method"] == name]
        tok, wall = sum(r["tokens"] for r in sel), sum(r["wall_s"] for r in sel)
        entry = {"tokens": tok, "wall_s": wall, "tok_s": tok / wall, "speedup_vs_verifier_only": tok / wall / base_rate,
                 "identical_to_verifier_only": all(r["identical_to_verifier_only"] for r in sel)}
        if "rounds" in sel[0]:
            entry["overhead_share"] = sum(r["overhead_share"] * r["wall_s"] for r in sel) / wall
            entry["tokens_per_round"] = tok / sum(r["rounds"] for r in sel)
            drafted = sum(r["drafted"] for r in sel)
            if drafted:
                entry["acceptance"] = sum(r["accepted"] for r in sel) / drafted
        summary[name] = entry
    spec, assisted = summary["speculative, draft model (ours)"], summary["transformers assisted generation"]
    summary["ours vs transformers assisted"] = {"ratio": spec["tok_s"] / assisted["tok_s"]}
    return summary


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--prompts", type=int, default=len(PROMPTS), help="how many of the built-in prompts")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    cfg = GenerationConfig(max_new_tokens=args.max_new_tokens, k=args.k)
    pair = load_pair(device=args.device, dtype=args.dtype,
                     progress=lambda f, m: print(f"[{f:4.0%}] {m}", file=sys.stderr, flush=True))
    env = environment(pair.device, pair.dtype)
    ours(pair, "def warmup():", GenerationConfig(max_new_tokens=8, k=args.k), "model")  # page in weights

    methods = {
        "verifier only (ours)": lambda p: ours(pair, p, cfg, "none"),
        "speculative, draft model (ours)": lambda p: ours(pair, p, cfg, "model"),
        "speculative, prompt lookup (ours)": lambda p: ours(pair, p, cfg, "lookup"),
        "transformers generate()": lambda p: hf(pair, p, cfg, assisted=False),
        "transformers assisted generation": lambda p: hf(pair, p, cfg, assisted=True),
    }
    rows = []
    for prompt in PROMPTS[: args.prompts]:
        reference = None
        for name, fn in methods.items():
            r = fn(prompt)
            reference = reference or r["token_ids"]
            r.update(method=name, prompt=prompt, identical_to_verifier_only=r["token_ids"] == reference)
            rows.append(r)
            print(f"{name:36s} {r['tok_s']:6.2f} tok/s  {r['tokens']} tokens  "
                  f"identical={r['identical_to_verifier_only']}  {prompt[:40]}", file=sys.stderr, flush=True)

    summary = summarize_runs(rows, list(methods))
    out = args.out or ROOT / "benchmarks" / "results" / f"throughput-{env['device']}-{env['dtype']}.json"
    write_json(out, {"benchmark": "throughput", **env,
                     "settings": {"k": args.k, "max_new_tokens": args.max_new_tokens, "temperature": 0.0,
                                  "prompts": PROMPTS[: args.prompts]},
                     "summary": summary, "runs": rows})
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
