"""Where the time of a run goes: per-phase totals of speculative and verifier-only runs, the share
of wall time outside model forwards, and the cost of one forward split into a fixed part and a
part per token, t(L) = t_f + t_r*L (docs/notation.md), fitted over L new tokens on top of a fixed context. A small t_r/t_f
is why verifying K+1 tokens in one forward costs little more than decoding one. Each L's time is the
fastest of its reps (:func:`specdec.model.timing.time_forward`, which says why), as the JSON's
``settings.estimator`` names it; results written before it was named took the median.

Against the physical limit (:mod:`benchmarks.roofline`): each model's forward at 1 and K+1 rows over
its roofline bound, max(weight bytes / the bandwidth its kernel reads at, multiply-adds / its
kernel's rate at that row count with the weights in L2), the bandwidth probed before, between and
after the fits (these shared machines drift). ``--kernels`` fits every integer kernel variant here
for both models too, their forwards timed in turn (all variants loaded at once), so a change in
machine load hits them alike.

    python -m benchmarks.profile           # 4 prompts x 64 tokens; L = 1..16, 11 reps
    python -m benchmarks.profile --quick   # 2 prompts x 32 tokens; L = 1..8, 7 reps
    python -m benchmarks.profile --kernels # and a fit per kernel variant, both models
    python -m benchmarks.profile --tiny    # tiny random models: checks the script, measures nothing
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

from benchmarks import roofline, tiny_pair
from benchmarks.common import cpu_id, environment, timed_variants, write_json
from benchmarks.sweep import pooled, run
from benchmarks.tables import estimator, fit_rows, fmt, machine_line, measured_ms
from benchmarks.throughput import CODE
from specdec import DecodeConfig
from specdec.decode.settings import add_model_arguments
from specdec.model.timing import ESTIMATOR, fit_line, time_forward, time_forwards

CPU = torch.device("cpu")
CONTEXT = 200  # tokens already in the cache when the timed forward starts (levers.py uses it too)
DRAFTERS = {"speculative, draft model": "model", "speculative, prompt lookup": "lookup", "verifier only": "none"}


def kernel_costs(loaders: tiny_pair.Loaders, pair, lengths: list[int], reps: int, k: int, log) -> dict:
    """time(L) fits per integer kernel variant here, per model: every variant of a model loaded at
    once (by ``loaders``) and their forwards timed in turn (:func:`specdec.model.timing.time_forwards`).
    A variant the calibration dropped as a reference path (10x slower than the fastest, seconds a
    forward) is left out and said so."""
    from specdec.model.precision import cpu_variants
    variants = timed_variants(loaders.timings(), ("int8", "int4"))
    out = {"left out": sorted(v.label for v in cpu_variants() if v.name in ("int8", "int4") and v not in variants)}
    for role, name in (("verifier", pair.target_name), ("draft", pair.draft_name)):
        models = {v.label: loaders.load_model(name, pair.device, v, "target" if role == "verifier" else "draft")[0]
                  for v in variants}
        ms = time_forwards(models, lengths, CONTEXT, reps, vocab=pair.vocab_size)
        out[role] = {label: {**fit(lengths, [ms[label][n] for n in lengths], k),
                             "weight_bytes": roofline.matmuls(model)[0]} for label, model in models.items()}
        for label, f in out[role].items():
            log(f"{role:9s} {label:14s} t_f = {f['a_ms']:.2f} ms, t_r = {f['b_ms_per_token']:.3f} ms/token, "
                f"K+1 vs 1 = {f[f'verify_vs_decode_k{k}']:.2f}")
        del models
    return out


def fit(lengths: list[int], ms: list[float], k: int) -> dict:
    """t(L) = t_f + t_r·L by :func:`specdec.model.timing.fit_line` on each L's time (ms), with R^2 and
    the times; ``a_ms`` is t_f and ``b_ms_per_token`` t_r (the JSON's names).
    ``verify_vs_decode_k<k>`` is the fitted cost of a (k+1)-token verification over a 1-token forward."""
    x = np.asarray(lengths, dtype=float)
    y = np.asarray(ms, dtype=float)
    a, b = fit_line(x.tolist(), y.tolist())
    ss_res, ss_tot = float(((y - a - b * x) ** 2).sum()), float(((y - y.mean()) ** 2).sum())
    one = a + b
    return {"a_ms": float(a), "b_ms_per_token": float(b), "r2": 1 - ss_res / ss_tot if ss_tot > 0 else 1.0,
            f"verify_vs_decode_k{k}": float((a + b * (k + 1)) / one) if one > 0 else None,
            "lengths": list(lengths), "ms": y.tolist()}


def forward_costs(pair, lengths: list[int], reps: int, k: int, log) -> dict:
    """The fit for the verifier and, if the pair has one, the draft model, each forward of L new tokens
    after a CONTEXT-token cache keeping the logits of all L (as a verification does)."""
    models = {"verifier": pair.target} | ({"draft": pair.draft} if pair.draft is not None else {})
    out = {}
    for role, model in models.items():
        ms = time_forward(model, lengths, CONTEXT, reps, vocab=pair.vocab_size)
        out[role] = fit(lengths, [ms[n] for n in lengths], k)
        log(f"{role:9s} forward: t_f = {out[role]['a_ms']:.2f} ms, t_r = {out[role]['b_ms_per_token']:.3f} ms/row, "
            f"R^2 = {out[role]['r2']:.3f}")
    return out


def model_layers(pair) -> dict[str, tuple]:
    """{role: (model, its precision's layers on the CPU, the precision's label)}, as the pair built them."""
    out = {"verifier": (pair.target, pair.precision.layers(CPU), pair.precision.label)}
    if pair.draft is not None:
        draft = pair.draft_precision or pair.precision
        out["draft"] = (pair.draft, draft.layers(CPU, batch_invariant=False), draft.label)
    return out


def phases(gens) -> dict:
    s = pooled(gens)
    forward_s = (1 - s.overhead_share) * s.wall_s
    return {"tokens": s.new_tokens, "wall_s": s.wall_s, "tok_s": s.tokens_per_s, "rounds": s.rounds,
            "phase_s": s.phase_totals, "phase_share": {ph: t / s.wall_s for ph, t in s.phase_totals.items()},
            "phase_ms_per_round": {ph: 1e3 * t / s.rounds for ph, t in s.phase_totals.items() if ph != "prefill"},
            "forward_s": forward_s, "forward_share": 1 - s.overhead_share, "overhead_share": s.overhead_share}


def setup(argv, description: str, full_tokens: int, tiny_help: str, k_help: str = "K"):
    """The options and set-up profile.py and runtime_compare.py share: parsed args, (new tokens,
    lengths L, reps), a stderr logger, the pair and prompts (warmed up), its environment and config."""
    defaults = DecodeConfig()
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--quick", action="store_true", help="2 prompts x 32 tokens; L = 1..8, 7 reps")
    ap.add_argument("--tiny", action="store_true", help=tiny_help)
    ap.add_argument("--kernels", action="store_true", help="also fit every integer kernel variant, both models")
    ap.add_argument("--k", type=int, default=defaults.k, help=k_help)
    ap.add_argument("--confidence", type=float, default=defaults.confidence)
    ap.add_argument("--out", default=None)
    add_model_arguments(ap)
    args = ap.parse_args(argv)
    sizes = (32, list(range(1, 9)), 7) if args.quick else (full_tokens, list(range(1, 17)), 11)
    log = lambda *a: print(*a, file=sys.stderr, flush=True)  # noqa: E731
    pair, prompts = tiny_pair.load(args, CODE[:2] if args.quick else CODE[:4])
    cfg = DecodeConfig(max_new_tokens=sizes[0], k=args.k, confidence=args.confidence)
    run(pair, prompts[0][1], DecodeConfig(max_new_tokens=8), "model")  # warm-up, not measured
    return args, sizes, log, pair, prompts, environment(pair), cfg


COMMAND = "python -m benchmarks.profile"


def _bandwidth_rows(d: dict) -> list[str]:
    """Results written before the roofline: each model's one-row forward against the time its weights
    take to read at the best float32-sum bandwidth measured in the same run."""
    bw, costs = d.get("bandwidth_gb_s"), d["forward_cost"]
    if not bw or not any(f.get("read_ms_at_bandwidth") for f in costs.values()):
        return []
    out = ["", f"Memory-read bandwidth (a 1.6 GB float32 sum on {d['hardware']['torch_threads']} threads, before, "
               f"between and after the fits): {', '.join(f'{b:.1f}' for b in bw)} GB/s; the best is the limit.", "",
           "| model | weight bytes read per token | read time at the best bandwidth | one-row forward | ratio |",
           "|---|---:|---:|---:|---:|"]
    for role, f in costs.items():
        one = measured_ms(f)[1]
        out.append(f"| {role} | {f['weight_bytes'] / 1e9:.2f} GB | {f['read_ms_at_bandwidth']:.1f} ms | {one:.1f} ms "
                   f"| **{f['one_row_vs_read']:.2f}x** |")
    return out


def _roofline_rows(d: dict) -> list[str]:
    """Each model's forward at 1 and K+1 rows over its roofline bound (:mod:`benchmarks.roofline`)."""
    roof = d.get("roofline")
    if not roof:
        return []
    out = ["", "Against the roofline: bound(L) = max(weight bytes / B, L x weights / R(L)), B the bandwidth the "
               "model's kernel reads a layer many times the last-level cache at (the best of the probes before, "
               "between and after the fits), R(L) its multiply-adds per second at L rows with the weights in L2 "
               "(`benchmarks/roofline.py`). The measured forward is the fit's point at L (the table above):", "",
           "| model, rows L | kernel | weight bytes | B | R(L) | bound: memory / compute | measured | measured / bound |",
           "|---|---|---:|---:|---:|---:|---:|---:|"]
    for role, r in roof.items():
        for n, x in r["rows"].items():
            rate = r["gmac_s"][n]
            out.append(f"| {role}, {n} | {r['precision']} | {r['weight_bytes'] / 1e9:.2f} GB "
                       f"| {max(r['bandwidth_gb_s']):.1f} GB/s | {fmt(rate, 'f')} GMAC/s "
                       f"| {x['memory_ms']:.2f} / {fmt(x['compute_ms'], 'f')} ms | {fmt(x['measured_ms'], 'f')} ms "
                       f"| **{fmt(x['ratio'], 'x')}** |")
    return out


def _kernel_rows(d: dict, k: int) -> list[str]:
    """t(L) = t_f + t_r·L per integer kernel variant, per model, their forwards interleaved."""
    if not d.get("kernels"):
        return []
    left = d["kernels"].get("left out")
    out = ["", "Per kernel variant (every variant of a model loaded at once, their forwards timed in turn"
               + (f"; left out as reference paths 10x slower at calibration: {', '.join(left)}" if left else "") + "):", ""]
    for role, variants in d["kernels"].items():
        if role == "left out":
            continue
        out += fit_rows({f"{role}, {label}": f for label, f in variants.items()}, k)
        out.append("")
    return out[:-1]


def render(d: dict) -> str:
    """docs/results.md's block for one profile result: the runs' phases, the forward fits, the
    bandwidth and the kernel variants."""
    s = d["settings"]
    out = [f"#### Where the time goes on {cpu_id(d['hardware'])}: {d['models']['target']} verified, "
           f"{d['models']['draft']} drafting", "",
           f"{machine_line(d)}. K = {s['k']}, confidence {s['confidence']}, {len(s['prompts'])} code prompts x "
           f"{s['max_new_tokens']} new tokens, T = 0. Phase shares are of wall time, every phase timed with a "
           "device sync.", "", "| run | tok/s | in model forwards | outside forwards | phases (share of wall time) |",
           "|---|---:|---:|---:|---|"]
    for name, r in d["runs"].items():
        phases = ", ".join(f"{ph} {share:.0%}" for ph, share in r["phase_share"].items())
        out.append(f"| {name} | {r['tok_s']:.2f} | {r['forward_share']:.0%} | {r['overhead_share']:.0%} | {phases} |")
    out += ["", f"One forward of L new tokens on a {s['context']}-token cache, fitted as t(L) = t_f + t_r·L over "
                f"L = {s['lengths'][0]}..{s['lengths'][-1]} ({estimator(s)} of {s['reps']} reps):", ""]
    out += fit_rows(d["forward_cost"], s["k"])
    out += _bandwidth_rows(d) + _roofline_rows(d) + _kernel_rows(d, s["k"])
    return "\n".join(out)


def main(argv=None) -> int:
    args, (n, lengths, reps), log, pair, prompts, env, cfg = setup(
        argv, __doc__.splitlines()[0], 64, "tiny random models built in-process (seconds)")

    runs = {}
    for name, drafter in DRAFTERS.items():
        runs[name] = phases([run(pair, ids, cfg, drafter) for _, ids in prompts])
        r = runs[name]
        log(f"{name:26s} {r['tok_s']:7.2f} tok/s  forwards {r['forward_share']:.0%} of wall time  "
            + "  ".join(f"{ph} {share:.0%}" for ph, share in r["phase_share"].items()))
    models = model_layers(pair)
    probe = roofline.probes({role: layers for role, (_, layers, _) in models.items()}, 8e6 if args.tiny else None)
    bandwidth = [probe()]
    costs = forward_costs(pair, lengths, reps, args.k, log)
    bandwidth.append(probe())
    kernels = kernel_costs(tiny_pair.loaders(args.tiny), pair, lengths, reps, args.k, log) if args.kernels else None
    if kernels:
        bandwidth.append(probe())
    del probe  # its layers (hundreds of MB each) before the compute rates are measured
    # against the best bandwidth seen: the physical limit, not a busy moment's
    roof = roofline.against(models, bandwidth, [1, args.k + 1], torch.get_num_threads(),
                            {role: measured_ms(costs[role]) for role in models})
    for role, r in roof.items():
        log(f"{role:9s} roofline: {', '.join(f'{b:.1f}' for b in r['bandwidth_gb_s'])} GB/s, "
            + ", ".join(f"L = {n}: bound {x['bound_ms']:.1f} ms ({x['bound_by']}), measured / bound "
                        + (f"{x['ratio']:.2f}" if x["ratio"] else "-") for n, x in r["rows"].items()))

    out = Path(args.out or tiny_pair.default_out("profile", env, args.tiny))
    write_json(out, {"benchmark": "profile", **env, "quick": args.quick, "tiny": args.tiny,
                     "models": {"target": pair.target_name, "draft": pair.draft_name},
                     "settings": {"k": args.k, "confidence": args.confidence, "max_new_tokens": n,
                                  "prompts": [label for label, _ in prompts], "context": CONTEXT,
                                  "lengths": lengths, "reps": reps, "estimator": ESTIMATOR},
                     "runs": runs, "forward_cost": costs, "roofline": roof, "kernels": kernels})
    log(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
