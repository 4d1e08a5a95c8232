"""A lower-bit draft, weighed before a kernel is written for it: what 3- and 2-bit draft weights do
to acceptance, and what they could at most do to speed.

Any draft is lossless (the rule corrects whatever it proposes); fewer bits change only how often
its tokens are kept and how long it takes to draft them. This script measures the first exactly
and bounds the second:

1. **Acceptance, measured.** The draft's weights are rounded to b bits per weight in groups of 32,
   each group with a float16 scale and minimum (the int4 kernel's form, :func:`quantize` with
   2**b levels), and run dequantised in float32 (``draft_precision float32``), so every b runs
   the same code; b = 4 beside the real int4 kernel checks that the dequantised stand-in keeps
   the same tokens. Greedy speculative runs at K = ``--k`` with the confidence threshold off (every
   round drafts K: acceptance per position is then counted over every round) on held-out code and
   prose prompts; acceptance per position a_i = kept / tested at position i.
2. **Speed, predicted (labelled so).** A b-bit draft in our kernel family reads
   (b + 1) / 5 of the int4 draft's bytes per token (b bits a weight plus 32 bits of scale and
   minimum per 32 weights, against 4 + 1). At best its one-row forward shrinks in that ratio (it
   is memory-bound at one row: ``benchmarks.profile``'s roofline). With this machine's measured
   round costs (:func:`specdec.decode.tree_shape.machine_costs`: the verifier's t(L), the int4
   draft's one-row forward d, the rest of a drafting round), each b's best K and its predicted
   tok/s E(K) / (K d_b + t(K+1) + rest), E(K) = 1 + a_1 + a_1 a_2 + ... from the measured a_i
   (:func:`specdec.decode.pacing.forecast`, as the adaptive pacer weighs a round), over the int4
   draft's at its best K. The ratio between bit widths is the finding; the absolute tok/s share the
   cost model's error, which the ratio mostly cancels (``benchmarks.throughput`` measures real runs).

A b worth a kernel must beat int4's predicted speed with its speed bounded this generously.

    python -m benchmarks.draft_bits            # 4 code + 2 prose prompts x 96 tokens, b = 4, 3, 2
    python -m benchmarks.draft_bits --quick    # 2 code + 1 prose x 48 tokens
    python -m benchmarks.draft_bits --tiny     # tiny random models: checks the script, measures nothing
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import torch

from benchmarks import tiny_pair
from benchmarks.common import cpu_id, environment, write_json
from benchmarks.levers import PROMPTS as CODE
from benchmarks.throughput import PROSE
from specdec import DecodeConfig
from specdec.decode.pacing import RoundCosts, forecast
from specdec.decode.start import start
from specdec.model.kernels import DenseLinear
from specdec.trace import ACCEPTED

BITS = (4, 3, 2)
GROUP = 32
INT4_BITS_PER_WEIGHT = 4 + 32 / GROUP  # 4-bit codes + a float16 scale and minimum per group


def quantize(weight: torch.Tensor, bits: int) -> torch.Tensor:
    """``weight`` rounded to ``bits`` bits in groups of 32 along its input dim (asymmetric: the
    group's minimum and range, float16 scale and minimum, as :func:`specdec.model.native.quantize_int4`
    does for 4), returned dequantised in float32."""
    n, k = weight.shape
    w = weight.float().reshape(n, k // GROUP, GROUP)
    lo, hi = w.amin(-1), w.amax(-1)
    levels = 2 ** bits - 1
    d = ((hi - lo) / levels).half().float()
    m = lo.half().float()
    q = torch.where(d[..., None] > 0, (w - m[..., None]) / d.clamp_min(1e-30)[..., None], 0.0).round_().clamp_(0, levels)
    return (q * d[..., None] + m[..., None]).reshape(n, k)


def dense_linears(model) -> list[DenseLinear]:
    return [m for m in model.modules() if isinstance(m, DenseLinear)]


def bytes_ratio(bits: int) -> float:
    """A b-bit draft's bytes per weight over the int4 kernel's (scales and minimums included)."""
    return (bits + 32 / GROUP) / INT4_BITS_PER_WEIGHT


def per_position(gens, k: int) -> dict:
    """a_i = kept / tested at each draft position over every round, and the totals."""
    kept, tested = [0] * k, [0] * k
    for g in gens:
        for r in g.rounds:
            for i, p in enumerate(r.positions[:k]):
                if p.tested:
                    tested[i] += 1
                    kept[i] += p.status == ACCEPTED
    return {"per_position": [kept[i] / tested[i] if tested[i] else None for i in range(k)],
            "tested": tested, "acceptance": sum(kept) / sum(tested) if sum(tested) else None}


def runs(pair, prompts: list[str], cfg: DecodeConfig) -> list:
    return [start(pair, p, cfg, "model").run() for p in prompts]


def predict(costs: RoundCosts, acceptance: list[float | None], ratio: float, k_max: int) -> dict:
    """The best K (1..k_max) and its predicted tok/s for a draft ``ratio`` times the int4 draft's
    one-row cost, from the measured acceptance per position (an unmeasured position: the one before),
    as the adaptive pacer weighs a round (:func:`specdec.decode.pacing.forecast`)."""
    a, last = [], 0.0
    for x in acceptance:
        last = x if x is not None else last
        a.append(last)
    scaled = replace(costs, draft=costs.draft * ratio)
    shares, given = tuple((x,) for x in a), tuple((1.0,) for _ in a)
    rounds = {k: forecast(shares, given, 1, k, k, scaled) for k in range(1, k_max + 1)}
    speed = {k: 1e3 * tokens / ms for k, (tokens, ms) in rounds.items()}
    best = max(speed, key=speed.get)
    return {"best_k": best, "tok_s": speed[best], "draft_ms": scaled.draft, "tokens_per_round": rounds[best][0]}


def against_int4(rows: dict) -> None:
    """Each row's predicted speed over the loaded int4 draft's (its first row): the finding. The
    absolute tok/s share the cost model's error (the pacer's timed forwards and rest), the ratio mostly not."""
    base = next(iter(rows.values()))["prediction"]["tok_s"]
    for r in rows.values():
        r["prediction"]["vs_int4"] = r["prediction"]["tok_s"] / base


def measure(pair, float_pair, groups: dict[str, list[str]], cfg: DecodeConfig, costs: RoundCosts, log) -> dict:
    out: dict = {}
    for group, prompts in groups.items():
        rows = {}
        real = per_position(runs(pair, prompts, cfg), cfg.k)
        rows[f"{pair.draft_precision.label} (as loaded)"] = {**real, "bits": 4, "bytes_vs_int4": 1.0,
                                     "prediction": predict(costs, real["per_position"], 1.0, cfg.k)}
        originals = [(lin, lin.weight.clone()) for lin in dense_linears(float_pair.draft)]
        try:
            for bits in BITS:
                for lin, w in originals:
                    lin.weight = quantize(w, bits)
                acc = per_position(runs(float_pair, prompts, cfg), cfg.k)
                rows[f"{bits}-bit, dequantised"] = {**acc, "bits": bits, "bytes_vs_int4": bytes_ratio(bits),
                                                    "prediction": predict(costs, acc["per_position"], bytes_ratio(bits), cfg.k)}
        finally:
            for lin, w in originals:
                lin.weight = w
        against_int4(rows)
        for name, r in rows.items():
            p = r["prediction"]
            log(f"{group:5s} {name:22s} acceptance {r['acceptance']:.3f}  per position "
                + " ".join("-" if x is None else f"{x:.2f}" for x in r["per_position"])
                + f"  -> predicted best K {p['best_k']}, {p['tok_s']:.2f} tok/s, {p['vs_int4']:.2f}x the int4 draft's")
        out[group] = rows
    return out


COMMAND = "python -m benchmarks.draft_bits"


def render(d: dict) -> str:
    """docs/results.md's block: acceptance per bit width and the predicted speed it allows."""
    hw = d["hardware"]
    out = [f"#### A lower-bit draft on {cpu_id(hw)} ({', '.join(hw['cpu_flags'])}), commit `{d['commit']}`", "",
           f"Greedy, K = {d['settings']['k']}, confidence off, {d['settings']['max_new_tokens']} new tokens a prompt. "
           "Acceptance measured; draft ms, best K and tok/s **predicted** from this machine's round costs with the "
           "draft's one-row forward scaled by its bytes (the most a kernel could give), as the adaptive pacer "
           "weighs a round; the ratio to the int4 draft is the finding:", "",
           "| prompts | draft weights | bytes vs int4 | acceptance | a_1 | predicted draft ms | predicted best K "
           "| predicted tok/s | vs the int4 draft |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for group, rows in d["results"].items():
        for name, r in rows.items():
            p = r["prediction"]
            a1 = r["per_position"][0]
            out.append(f"| {group} | {name} | {r['bytes_vs_int4']:.2f} | {r['acceptance']:.1%} | "
                       f"{'-' if a1 is None else f'{a1:.1%}'} | {p['draft_ms']:.1f} | {p['best_k']} | "
                       f"{p['tok_s']:.2f} | {p['vs_int4']:.2f}x |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="2 code + 1 prose prompts x 48 tokens")
    ap.add_argument("--tiny", action="store_true", help="tiny random models: checks the script, measures nothing")
    ap.add_argument("--k", type=int, default=6)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    tokens = 10 if args.tiny else 48 if args.quick else 96
    cfg = DecodeConfig(k=args.k, confidence=0.0, max_new_tokens=tokens)
    if args.tiny:
        pair = float_pair = tiny_pair.benchmark_pair(lean_forward=True)  # a float32 lean draft: its own stand-in
        groups = {"code": ["w1 w2 w3 w1 w2 w3"], "prose": ["w7 w8 w9"]}
        costs = RoundCosts({1: 1.0, 2: 1.2, 8: 2.0}, 0.3, 0.1)
    else:
        from specdec import load_pair
        from specdec.decode.tree_shape import machine_costs
        pair = load_pair()
        float_pair = load_pair(draft_precision="float32")
        groups = {"code": CODE[:2] if args.quick else CODE, "prose": PROSE[:1] if args.quick else PROSE}
        costs = RoundCosts.of_machine(machine_costs(pair))
    results = measure(pair, float_pair, groups, cfg, costs, print)
    env = environment(pair)
    out = Path(args.out or tiny_pair.default_out("draft_bits", env, args.tiny))
    write_json(out, {"benchmark": "draft_bits", **env, "tiny": args.tiny, "quick": args.quick,
                     "settings": {"k": args.k, "confidence": 0.0, "max_new_tokens": tokens, "group": GROUP,
                                  "prompts": groups},
                     "costs_ms": {"verify": costs.verify, "draft": costs.draft, "rest": costs.rest,
                                  "rest_per_draft": costs.rest_per_draft},
                     "results": results})
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
