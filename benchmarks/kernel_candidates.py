"""The ways issue 26 named to get a decode-shaped int8/int4 linear, measured on one verifier layer
(1536 -> 8960, the MLP's widest) on this machine, against our own kernels:

1. torch's code generation for CPU GEMMs: ``torch.compile`` with ``freezing`` and max-autotune's
   CPP GEMM template, on the three patterns inductor lowers to it: W8A8 with dynamic per-row
   activation scales (``_int_mm`` then the two scales, torchao's int8-dynamic pattern, rewritten to
   oneDNN's ``qlinear_pointwise``), weight-only int8 (``_weight_int8pack_mm``, bf16 activations) and
   weight-only int4 (``_weight_int4pack_mm_for_cpu``, bf16 activations). Each is compiled for one
   row and for seven (its shapes are static), in a fresh process: cold (empty inductor cache) and
   warm (a second process on the same cache, what every start would pay), and whether inductor's
   generated code holds a CPP micro-GEMM at all.
2. torchao's CPU kernels (``da8w4_linear_cpu``): whether the installed or installable torchao has
   them.
3. Ours: ``specdec`` int8 and int4 (:mod:`specdec.model.native`).

Every candidate is timed interleaved with ``specdec int4`` in its own process (1 and 7 rows, rep
by rep, median), so a busy neighbour moves both and the ratio stays readable.

    python -m benchmarks.kernel_candidates            # writes results/kernel_candidates-<cpu>.json
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.tables import machine_line

IN, OUT = 1536, 8960
ROWS = (1, 7)
REPS = 60
COMPILED = ("inductor W8A8 dynamic", "inductor int8 weight-only", "inductor int4 weight-only")
OURS = ("specdec int8", "specdec int4")
REFERENCE = "specdec int4"


class W8A8(torch.nn.Module):
    """int8 activations quantised per row here, int8 weights per output channel, int32 sums."""

    def __init__(self, w: torch.Tensor):
        super().__init__()
        s = w.abs().amax(1).clamp_min(1e-12) / 127
        self.register_buffer("wt", (w / s[:, None]).round().clamp(-127, 127).to(torch.int8).t().contiguous())
        self.register_buffer("ws", s.float())

    def forward(self, x):
        xs = x.abs().amax(-1, keepdim=True).clamp_min(1e-12) / 127
        xq = (x / xs).round().clamp(-127, 127).to(torch.int8)
        return (torch._int_mm(xq, self.wt).to(torch.float32) * xs) * self.ws


class WeightOnly8(torch.nn.Module):
    def __init__(self, w: torch.Tensor):
        super().__init__()
        s = w.abs().amax(1).clamp_min(1e-12) / 127
        self.register_buffer("q", (w / s[:, None]).round().clamp(-127, 127).to(torch.int8))
        self.register_buffer("s", s.to(torch.bfloat16))

    def forward(self, x):
        return torch._weight_int8pack_mm(x.to(torch.bfloat16), self.q, self.s).float()


class WeightOnly4(torch.nn.Module):
    def __init__(self, w: torch.Tensor):
        super().__init__()
        from specdec.model.kernels import Int4Linear
        ref = Int4Linear.from_weight(w, None)
        self.register_buffer("packed", ref.packed)
        self.register_buffer("sz", ref.scales_and_zeros)

    def forward(self, x):
        return torch.ops.aten._weight_int4pack_mm_for_cpu(x.to(torch.bfloat16), self.packed, 32, self.sz).float()


def ours(name: str, w: torch.Tensor):
    from specdec.model.native import NativeInt4Linear, NativeInt8Linear
    return (NativeInt8Linear if name == "specdec int8" else NativeInt4Linear).from_weight(w, None)


def _compile(module: torch.nn.Module, rows: int) -> tuple[object, float]:
    import torch._inductor.config as cfg
    cfg.freezing = True
    cfg.max_autotune = True
    cfg.max_autotune_gemm_backends = "CPP,ATEN"
    f = torch.compile(module, dynamic=False)
    x = torch.randn(rows, IN)
    t0 = time.perf_counter()
    with torch.no_grad():
        f(x)
    return f, time.perf_counter() - t0


def one(name: str) -> dict:
    """In this process: build (and compile) ``name``, time it against the reference."""
    torch.manual_seed(0)
    w = torch.randn(OUT, IN) * 0.02
    out: dict = {"name": name}
    if name in COMPILED:
        module = {"inductor W8A8 dynamic": W8A8, "inductor int8 weight-only": WeightOnly8,
                  "inductor int4 weight-only": WeightOnly4}[name](w).eval()
        calls, out["compile_s"] = {}, {}
        try:
            for rows in ROWS:
                calls[rows], out["compile_s"][rows] = _compile(module, rows)
        except Exception as e:  # noqa: BLE001 - a candidate that fails to compile is a result, said so
            return {**out, "error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}
        eager = module
    else:
        layer = ours(name, w)
        calls = {rows: layer for rows in ROWS}
        eager = layer
    ref = ours(REFERENCE, w)
    xs = {rows: torch.randn(rows, IN) for rows in ROWS}
    with torch.no_grad():
        want = eager(xs[7]) if name in COMPILED else None
        if want is not None:
            got = calls[7](xs[7])
            out["max_abs_diff_vs_eager"] = float((got - want).abs().max())
        times = {(who, rows): [] for who in ("candidate", "reference") for rows in ROWS}
        for rep in range(REPS + 3):
            for rows in ROWS:
                for who, f in (("candidate", calls[rows]), ("reference", ref)):
                    t0 = time.perf_counter()
                    f(xs[rows])
                    if rep >= 3:
                        times[who, rows].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    out["ms"] = {rows: med["candidate", rows] for rows in ROWS}
    out["reference_ms"] = {rows: med["reference", rows] for rows in ROWS}
    out["vs_reference"] = {rows: med["candidate", rows] / med["reference", rows] for rows in ROWS}
    out["seven_vs_one"] = med["candidate", 7] / med["candidate", 1]
    return out


def _child(name: str, cache: str) -> dict:
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache}
    p = subprocess.run([sys.executable, "-m", "benchmarks.kernel_candidates", "--one", name],
                       capture_output=True, text=True, env=env, timeout=3600)
    lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
    if p.returncode or not lines:
        return {"name": name, "error": (p.stderr.strip().splitlines() or ["no output"])[-1][:300]}
    return json.loads(lines[-1])


def _micro_gemm_files(cache: str) -> int:
    """How many of inductor's generated sources hold a CPP micro-GEMM (the template's code)."""
    n = 0
    for p in Path(cache).rglob("*"):
        if p.is_file() and p.suffix in (".py", ".cpp", ".h"):
            try:
                n += "micro_gemm" in p.read_text(errors="ignore")
            except OSError:
                pass
    return n


def torchao_status() -> dict:
    spec = importlib.util.find_spec("torchao")
    if spec is None:
        return {"installed": False, "note": (
            "not installed. The PyPI wheel (0.18.0, checked 2026-12-02) ships CUDA libraries only and "
            "registers no torchao CPU op (no da8w4_linear_cpu); PyPI has no sdist of a recent release "
            "(0.1 is the newest), so the source build with USE_CPU_KERNELS=1 needs the GitHub tree, "
            "which this workplace cannot reach; and its da8w4 kernel is fast only on AMX")}
    import torchao  # noqa: F401
    ops = [o for o in dir(torch.ops.torchao) if "cpu" in o.lower()]
    return {"installed": True, "version": getattr(torchao, "__version__", "?"), "cpu_ops": ops}


COMMAND = "python -m benchmarks.kernel_candidates"


def render(d: dict) -> str:
    """docs/results.md's block for one result: each candidate linear against the reference, and
    what compiling it costs."""
    n_in, n_out = d["layer"]
    out = [f"#### Ways to a decode-shaped linear, one {n_in}x{n_out} layer", "",
           f"{machine_line({**d, 'precision': '-'})}. Each candidate in its own process, timed interleaved with "
           f"{d['reference']} (1 and 7 rows, {d['reps']} reps, medians); compiled ones with `torch.compile` "
           "(freezing, max-autotune, the CPP GEMM template among the choices), once per row count, on an empty "
           "inductor cache (cold) and again on the same cache in a fresh process (warm, what each start would pay).",
           "", f"| candidate | 1 row | 7 rows | 7 rows / 1 | vs {d['reference']} at 1 / 7 rows | compile, cold "
           "(1 + 7 rows) | compile, warm | CPP micro-GEMM in its code |", "|---|---:|---:|---:|---:|---:|---:|:---:|"]
    for name, c in d["candidates"].items():
        if "error" in c:
            out.append(f"| {name} | failed: {c['error']} | | | | | | |")
            continue
        ms, vs = c["ms"], c["vs_reference"]
        cold = c.get("compile_s")
        warm = c.get("warm_compile_s")
        out.append(f"| {name} | {ms['1']:.2f} ms | {ms['7']:.2f} ms | {c['seven_vs_one']:.2f} | "
                   f"{vs['1']:.2f}x / {vs['7']:.2f}x | "
                   + (f"{cold['1']:.0f} + {cold['7']:.0f} s | " if cold else "– | ")
                   + (f"{warm['1']:.1f} + {warm['7']:.1f} s | " if warm else "– | ")
                   + ("yes" if c.get("cpp_micro_gemm_sources") else "no" if cold else "–") + " |")
    t = d["torchao"]
    out += ["", "torchao: " + (t["note"] if not t["installed"] else
                               f"{t['version']}, CPU ops: {', '.join(t['cpu_ops']) or 'none'}") + "."]
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    if args.one:
        print(json.dumps(one(args.one)))
        return
    from benchmarks.common import ROOT, machine, write_json
    log = lambda msg: print(msg, flush=True)  # noqa: E731
    results = {}
    for name in OURS:
        results[name] = _child(name, tempfile.mkdtemp())
        log(f"{name}: {results[name]}")
    for name in COMPILED:
        cache = tempfile.mkdtemp(prefix="inductor-")
        cold = _child(name, cache)
        warm = _child(name, cache)
        cold["warm_compile_s"] = warm.get("compile_s")
        cold["warm_error"] = warm.get("error")
        cold["cpp_micro_gemm_sources"] = _micro_gemm_files(cache)
        results[name] = cold
        shutil.rmtree(cache, ignore_errors=True)
        log(f"{name}: {cold}")
    doc = {"benchmark": "kernel_candidates", **machine(torch.device("cpu")), "layer": [IN, OUT], "rows": list(ROWS), "reps": REPS,
           "reference": REFERENCE, "candidates": results, "torchao": torchao_status()}
    path = args.out or ROOT / "benchmarks" / "results" / f"kernel_candidates-{doc['cpu_slug']}.json"
    write_json(path, doc)
    log(f"wrote {path}")


if __name__ == "__main__":
    main()
