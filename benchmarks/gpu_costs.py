"""Forward costs on a GPU: the embedded pair's exact shapes, random weights, eager against CUDA graphs.

The real weights cannot travel to a lent GPU machine (no registry there, 64 MiB carried), and a
forward's cost depends on the shapes, not on the values, so this times randomly initialised
models with the configs of Qwen2.5-Coder-0.5B (draft) and 1.5B (verifier), on the lean forward
exactly as the engine runs it on that device (static cache, ``CachedLM.forward``, the clock
waiting for the device):

* time(L) for L = 1..16 new rows after a ``--context``-token prompt, per model and mode (eager;
  CUDA graphs where there are any), the fastest of ``--reps`` calls (:func:`specdec.model.timing.time_forward`,
  as the JSON's ``estimator`` says), and the fit t(L) = t_f + t_r·L;
* the verifier padded to ``GPU_PAD_ROWS`` rows, as it runs for exact greedy output: what
  exactness costs against the fastest (unpadded) one-row forward;
* the predicted speed-up from those costs at the acceptance measured on the CPU for the real
  pair (the committed ``throughput-*.json``): E(a, K) t_v(1) / (K t_d(1) + t_v(K + 1)), best K,
  against the fastest verifier-only configuration measured here (graphs, unpadded, one row).

    python -m benchmarks.gpu_costs                  # on the machine's GPU (CUDA, else MPS)
    python -m benchmarks.gpu_costs --tiny --device cpu   # the script itself, in seconds
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from benchmarks.common import ROOT, environment, write_json
from benchmarks.tables import estimator
from specdec.model.devices import resolve_device
from specdec.model.graphs import available as graphs_available
from specdec.model.precision import Precision, choose
from specdec.model.qwen2 import LeanQwen2
from specdec.model.timing import ESTIMATOR, fit_line, time_forward
from specdec.teach.theory import tokens_per_round
from specdec.weights.loading import GPU_PAD_ROWS
from specdec.weights.pairing import ModelPair

# Qwen2.5-Coder-0.5B/1.5B-Instruct as the embedded GGUFs convert (separate output layers)
SHAPES = {
    "draft": dict(hidden_size=896, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                  intermediate_size=4864),
    "target": dict(hidden_size=1536, num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2,
                   intermediate_size=8960),
}
COMMON = dict(vocab_size=151936, rms_norm_eps=1e-6, max_position_embeddings=32768, tie_word_embeddings=False,
              rope_theta=1e6, hidden_act="silu", model_type="qwen2")
TINY = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, intermediate_size=128,
            vocab_size=512, max_position_embeddings=1024)
ROWS = range(1, 17)
TARGETS = {"verify_7_over_1": 1.2, "draft_over_verify": 0.35, "graphs_speedup": 2.0, "predicted_speedup": 2.5}


def config(role: str, tiny: bool):
    from transformers import Qwen2Config
    return Qwen2Config(**{**COMMON, **SHAPES[role], **(TINY if tiny else {})})


class RandomWeights:
    """A Qwen2 state dict made one tensor at a time on the device (N(0, 0.02), norms 1), so the
    float32 copy of a whole model never exists."""

    def __init__(self, cfg, device: torch.device, seed: int):
        self.cfg, self.device, self.seed = cfg, device, seed
        e, h, g = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads
        d, i, v = e // h, cfg.intermediate_size, cfg.vocab_size
        self.shapes = {"model.embed_tokens.weight": (v, e), "model.norm.weight": (e,), "lm_head.weight": (v, e)}
        for n in range(cfg.num_hidden_layers):
            p = f"model.layers.{n}."
            self.shapes.update({p + "input_layernorm.weight": (e,), p + "post_attention_layernorm.weight": (e,),
                                p + "self_attn.q_proj.weight": (h * d, e), p + "self_attn.q_proj.bias": (h * d,),
                                p + "self_attn.k_proj.weight": (g * d, e), p + "self_attn.k_proj.bias": (g * d,),
                                p + "self_attn.v_proj.weight": (g * d, e), p + "self_attn.v_proj.bias": (g * d,),
                                p + "self_attn.o_proj.weight": (e, h * d), p + "mlp.gate_proj.weight": (i, e),
                                p + "mlp.up_proj.weight": (i, e), p + "mlp.down_proj.weight": (e, i)})

    def __contains__(self, key: str) -> bool:
        return key in self.shapes

    def __getitem__(self, key: str) -> torch.Tensor:
        shape = self.shapes[key]
        if key.endswith("norm.weight"):
            return torch.ones(shape, device=self.device)
        g = torch.Generator(self.device).manual_seed(self.seed + list(self.shapes).index(key))
        return torch.randn(shape, generator=g, device=self.device) * 0.02


def build(role: str, device: torch.device, precision, tiny: bool, graphs: bool, pad_rows: int = 0) -> LeanQwen2:
    cfg = config(role, tiny)
    make = precision.layers(device, batch_invariant=role == "target").build
    return LeanQwen2(cfg, RandomWeights(cfg, device, seed=1 if role == "target" else 2), make, precision.dense_dtype,
                     device=device, static=True, pad_rows=pad_rows, graphs=graphs)  # a GPU's path, also on a CPU


def fit(times: dict[int, float]) -> tuple[float, float]:
    """(t_f, t_r) over the measured L, by :func:`specdec.model.timing.fit_line`."""
    return fit_line(list(times), list(times.values()))


def cpu_acceptance() -> dict:
    """The real pair's acceptance on the CPU, from the newest committed throughput JSON."""
    files = sorted((ROOT / "benchmarks" / "results").glob("throughput-cpu-*.json"),
                   key=lambda p: json.loads(p.read_text())["date"])
    if not files:
        return {}
    d = json.loads(files[-1].read_text())
    out = {"source": files[-1].name, "cpu": d["hardware"]["cpu"]}
    for kind in ("code", "prose"):
        spec = d["summary"].get(kind, {}).get("speculative, draft model (ours)")
        if spec:
            out[kind] = spec["acceptance"]
    return out


def predict(a: float, t_v: dict[int, float], t_d1: float, base_ms: float) -> dict:
    """Best K and its speed-up E(a, K) * base / (K t_d(1) + t_v(K+1)) over the measured t_v."""
    best = max(range(1, max(t_v)), key=lambda k: tokens_per_round(a, k) / (k * t_d1 + t_v[k + 1]))
    return {"k": best, "tokens_per_round": tokens_per_round(a, best),
            "speedup": tokens_per_round(a, best) * base_ms / (best * t_d1 + t_v[best + 1])}


def measure(device: torch.device, tiny: bool, context: int, reps: int, precision_name: str) -> dict:
    precision = (Precision("float32", "float32: the script's own check on the CPU") if device.type == "cpu"
                 else choose(device, precision_name))
    modes = ["eager"] + (["graphs"] if graphs_available(device) else [])
    costs: dict = {}
    for role in ("target", "draft"):
        for mode in modes:
            model = build(role, device, precision, tiny, graphs=mode == "graphs")
            t = time_forward(model, ROWS, context, reps)
            a, b = fit(t)
            costs[f"{role} {mode}"] = {"ms": {str(k): v for k, v in t.items()}, "a_ms": a, "b_ms": b}
            del model
            if device.type == "cuda":
                torch.cuda.empty_cache()
    best_mode = modes[-1]
    padded = build("target", device, precision, tiny, graphs=best_mode == "graphs", pad_rows=GPU_PAD_ROWS)
    pad = time_forward(padded, [1, 7], context, reps)
    del padded
    tv = {int(k): v for k, v in costs[f"target {best_mode}"]["ms"].items()}
    td1 = costs[f"draft {best_mode}"]["ms"]["1"]
    ratios = {"verify_7_over_1": tv[7] / tv[1], "draft_over_verify": td1 / tv[1],
              "graphs_speedup": {r: costs[f"{r} eager"]["ms"]["1"] / costs[f"{r} graphs"]["ms"]["1"]
                                 for r in ("target", "draft")} if "graphs" in modes else None,
              "exact_padding_cost": pad[1] / tv[1]}
    acc = cpu_acceptance()
    prediction = {}
    for kind in ("code", "prose"):
        if kind in acc:
            prediction[kind] = {
                "fast verification (unpadded)": predict(acc[kind], tv, td1, tv[1]),
                # exact: every verification runs padded, so t_v(K + 1) = t_v(pad) for K + 1 <= GPU_PAD_ROWS
                "exact verification (padded)": predict(acc[kind], {k: pad[7] for k in tv}, td1, tv[1]),
            }
    pair = ModelPair.__new__(ModelPair)  # environment() reads only the device and precisions
    pair.device, pair.precision, pair.draft_precision = device, precision, precision
    return {"benchmark": "gpu_costs", **environment(pair), "tiny": tiny, "random_weights": True,
            "shapes": {r: {**SHAPES[r], **(TINY if tiny else {})} for r in SHAPES}, "context": context, "reps": reps,
            "estimator": ESTIMATOR, "modes": modes, "fastest_verifier_only": f"target {best_mode}, 1 row, unpadded",
            "costs": costs,
            "padded": {"rows": GPU_PAD_ROWS, "ms": {str(k): v for k, v in pad.items()}}, "ratios": ratios,
            "cpu_acceptance": acc, "prediction": prediction, "targets": TARGETS}


COMMAND = "python -m benchmarks.gpu_costs"


def render(d: dict) -> str:
    """docs/results.md's block for one result: each model's forward costs per mode, the ratios
    against issue 17's targets, and the predicted speed-ups."""
    hw, r, t, c = d["hardware"], d["ratios"], d["targets"], d["costs"]
    ok = lambda x, lim, le=True: f"{x:.2f}{'' if (x <= lim if le else x >= lim) else ' (missed)'}"  # noqa: E731
    out = [f"#### Forward costs on {hw['accelerator']}: the embedded pair's shapes, random weights", "",
           f"{hw['accelerator']} ({d['device']}), precision {d['precision']}; torch {d['versions']['torch']}; commit "
           f"`{d['commit']}`, {d['date'][:10]}. {estimator(d).capitalize()} of {d['reps']} forwards of L new rows "
           f"after a {d['context']}-token context, through `CachedLM.forward` with the clock waiting for the device; "
           "t(L) = t_f + t_r·L fitted over L = 1..16.",
           "", "| model | mode | 1 row (ms) | 7 rows (ms) | 16 rows (ms) | t_f (ms) | t_r (ms/row) |",
           "|---|---|---:|---:|---:|---:|---:|"]
    for name, x in c.items():
        ms = x["ms"]
        out.append(f"| {name.split()[0].replace('target', 'verifier')} | {name.split()[1]} | {ms['1']:.2f} "
                   f"| {ms['7']:.2f} | {ms['16']:.2f} | {x['a_ms']:.2f} | {x['b_ms']:.3f} |")
    g = r["graphs_speedup"]
    out += ["", "| against issue 17's targets | measured | target |", "|---|---:|---:|",
            f"| verifier, 7 rows / 1 row | {ok(r['verify_7_over_1'], t['verify_7_over_1'])} | <= {t['verify_7_over_1']} |",
            f"| draft step / verifier step | {ok(r['draft_over_verify'], t['draft_over_verify'])} "
            f"| <= {t['draft_over_verify']} |"]
    if g:
        out += [f"| graphs vs eager, one-row step, {m.replace('target', 'verifier')} | "
                f"{ok(v, t['graphs_speedup'], le=False)}x | >= {t['graphs_speedup']}x |" for m, v in g.items()]
    for kind, p in d["prediction"].items():
        for how, x in p.items():
            out.append(f"| predicted speed-up, {kind} (CPU acceptance {d['cpu_acceptance'][kind]:.0%}), {how}, "
                       f"best K = {x['k']} | {ok(x['speedup'], t['predicted_speedup'], le=False)}x "
                       f"| >= {t['predicted_speedup']}x |")
    out += ["", f"Exact greedy output pads every verifier forward to {d['padded']['rows']} rows: its one-token step "
            f"costs {r['exact_padding_cost']:.2f}x the unpadded one ({d['padded']['ms']['1']:.2f} ms). Acceptance from "
            f"`{d['cpu_acceptance'].get('source')}` ({d['cpu_acceptance'].get('cpu')})."]
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="auto")
    ap.add_argument("--precision", default="auto")
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--tiny", action="store_true", help="tiny shapes: checks the script, measures nothing")
    ap.add_argument("--quick", action="store_true", help="3 calls per point")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    device = resolve_device(args.device)
    t0 = time.perf_counter()
    d = measure(device, args.tiny, args.context, 3 if args.quick else args.reps, args.precision)
    d["quick"] = args.quick
    d["wall_s"] = time.perf_counter() - t0
    out = args.out or ROOT / "benchmarks" / "results" / f"gpu_costs-{d['cpu_slug']}{'-tiny' if args.tiny else ''}.json"
    write_json(out, d)
    r = d["ratios"]
    print(f"{d['hardware']['accelerator']}: t_v(7)/t_v(1) {r['verify_7_over_1']:.2f}, t_d(1)/t_v(1) "
          f"{r['draft_over_verify']:.2f}, graphs {r['graphs_speedup']}, padding x{r['exact_padding_cost']:.2f}; "
          f"prediction {json.dumps(d['prediction'])}; wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
