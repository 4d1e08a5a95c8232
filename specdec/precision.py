"""Which weight representation runs on this machine: chosen by capability checks and a cached
one-time measurement, never from one machine's numbers.

The fastest kernel differs by CPU: on an AVX2-only AMD EPYC bf16 matmuls are emulated (slow) and
fbgemm's int8 GEMM is 10x faster than float32; on a Xeon with AMX, bf16 is native. So on a CPU
``auto`` times every available representation on one verifier-sized layer (1536 -> 8960) at 1 row
(verifier-only decoding, drafting) and K+1 rows (one verification), picks the lowest sum, and
caches the result per CPU model, flags and torch version. GPUs take their native half precision.
The choice and the reason are one line (``Precision.reason``) shown by the CLI, app and benchmarks.
"""
from __future__ import annotations

import hashlib
import json
import platform
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from .config import ConfigError, DecodeConfig
from .kernels import DenseLinear, Fp16Linear, Int4Linear, Int8Linear, PackedLinear

PRECISIONS = ("auto", "float32", "bfloat16", "float16", "int8", "int4")
CALIBRATION_SHAPE = (8960, 1536)  # (out, in) of the verifier's MLP up-projection


@dataclass(frozen=True)
class Precision:
    name: str                      # float32 | bfloat16 | float16 | int8 | int4
    reason: str                    # one line: why this one
    transposed: bool = False       # float32 only: compute small-row matmuls as (W @ x^T)^T

    @property
    def dense_dtype(self) -> torch.dtype:
        """dtype of the parts that stay dense (embeddings) and of the model on a GPU."""
        return {"float32": torch.float32, "float16": torch.float16}.get(self.name, torch.bfloat16)

    def linear(self, weight: torch.Tensor, bias: torch.Tensor | None, batch_invariant: bool = True) -> PackedLinear:
        """The CPU layer for a float weight (out, in) in this representation. ``batch_invariant``
        matters for int8 only: the verifier needs it (see :class:`Int8Linear`), the draft does not."""
        weight = weight.float()
        if self.name == "float32":
            return DenseLinear.from_weight(weight, bias, torch.float32, self.transposed)
        if self.name == "bfloat16":
            return DenseLinear.from_weight(weight, bias, torch.bfloat16)
        if self.name == "int8":
            return Int8Linear.from_weight(weight, bias, batch_invariant)
        return {"float16": Fp16Linear, "int4": Int4Linear}[self.name].from_weight(weight, bias)


def cpu_description() -> dict:
    """CPU model and the flags that decide kernels; every benchmark JSON carries it."""
    model, flags = platform.processor() or platform.machine(), []
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = line.split(":", 1)[1].split()
    except OSError:
        pass
    keep = ("avx2", "fma", "f16c", "avx512f", "avx512_bf16", "avx512_vnni", "avx_vnni", "amx_bf16", "amx_int8",
            "amx_tile")
    return {"model": model, "flags": [f for f in keep if f in flags], "isa": torch.backends.cpu.get_cpu_capability()}


def cpu_capabilities() -> dict:
    return {"native_bf16": bool(torch.ops.mkldnn._is_mkldnn_bf16_supported()),
            "fbgemm": "fbgemm" in torch.backends.quantized.supported_engines,
            "isa": torch.backends.cpu.get_cpu_capability()}


def cpu_candidates(caps: dict | None = None) -> list[str]:
    """Representations with a native kernel here. bf16 only with native bf16 (emulated bf16 is
    slower than float32); int8/float16 need fbgemm (x86); int4 needs torch's AVX2/AVX512 path."""
    caps = caps or cpu_capabilities()
    names = ["float32"]
    if caps["native_bf16"]:
        names.append("bfloat16")
    if caps["fbgemm"]:
        names += ["float16", "int8"]
    if caps["isa"] in ("AVX2", "AVX512"):
        names.append("int4")
    return names


def _median_ms(layer: PackedLinear, rows: int, reps: int = 15) -> float:
    x = torch.randn(rows, layer.in_features)
    for _ in range(3):
        layer(x)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        layer(x)
        times.append(time.perf_counter() - t0)
    return sorted(times)[reps // 2] * 1e3


def calibrate(names: list[str], k: int) -> dict[str, list[float]]:
    """Median ms of one verifier-sized layer at 1 and K+1 rows, per representation."""
    weight = torch.randn(*CALIBRATION_SHAPE) * 0.02
    out = {}
    for name in names:
        variants = [Precision(name, "", False)] + ([Precision(name, "", True)] if name == "float32" else [])
        for p in variants:
            layer = p.linear(weight, None)
            out[name + (" transposed" if p.transposed else "")] = [_median_ms(layer, 1), _median_ms(layer, k + 1)]
    return out


def _calibration_file(k: int) -> Path:
    from .embedded import cache_root
    cpu = cpu_description()
    key = hashlib.sha256(json.dumps([cpu, torch.__version__, k]).encode()).hexdigest()[:16]
    return cache_root() / "calibration" / f"{key}.json"


def cpu_timings(k: int) -> dict[str, list[float]]:
    """Cached per CPU model, flags, torch version and K; measured once (a few seconds)."""
    path = _calibration_file(k)
    if path.is_file():
        return json.loads(path.read_text())["timings_ms"]
    timings = calibrate(cpu_candidates(), k)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"cpu": cpu_description(), "torch": torch.__version__, "k": k, "timings_ms": timings}))
    return timings


def pick(timings: dict[str, list[float]], k: int, cpu_model: str) -> Precision:
    """The representation with the lowest cost at 1 row plus K+1 rows."""
    best = min(timings, key=lambda n: sum(timings[n]))
    listing = ", ".join(f"{n} {t1:.2f}+{tk:.2f}" for n, (t1, tk) in sorted(timings.items(), key=lambda kv: sum(kv[1])))
    reason = (f"{best}: fastest here at 1 + {k + 1} rows (ms per {CALIBRATION_SHAPE[1]}x{CALIBRATION_SHAPE[0]} "
              f"layer: {listing}) on {cpu_model}")
    return Precision(best.removesuffix(" transposed"), reason, best.endswith(" transposed"))


def choose(device: torch.device, requested: str | None = "auto", k: int = DecodeConfig.k) -> Precision:
    """``auto``: the measured fastest on a CPU, native half precision on a GPU; else as requested."""
    requested = requested or "auto"
    if requested not in PRECISIONS:
        raise ConfigError(f"precision must be one of {', '.join(PRECISIONS)} (got {requested!r})", "precision")
    if device.type != "cpu":
        native = "bfloat16" if device.type == "cuda" else "float16"
        if requested not in ("auto", "float32", "bfloat16", "float16"):
            raise ConfigError(f"precision {requested!r} is CPU-only; on {device.type} use auto, float32, "
                              "bfloat16 or float16")
        name = native if requested == "auto" else requested
        return Precision(name, f"{name}: {'native half precision of' if requested == 'auto' else 'requested on'} "
                               f"{device.type}")
    if requested == "auto":
        return pick(cpu_timings(k), k, cpu_description()["model"])
    available = cpu_candidates()
    if requested not in available:
        raise ConfigError(f"precision {requested!r} has no native kernel on this CPU "
                          f"({cpu_description()['isa']}); available: {', '.join(available)}")
    transposed = False
    if requested == "float32":
        t = cpu_timings(k)
        transposed = sum(t.get("float32 transposed", [1e9])) < sum(t["float32"])
    return Precision(requested, f"{requested}: requested", transposed)
