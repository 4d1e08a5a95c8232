"""Which weight representation runs on this machine: chosen by capability checks and a cached
one-time measurement, never from one machine's numbers; for the verifier and the draft apart.

The fastest kernel differs by CPU: on an AVX2-only AMD EPYC bf16 matmuls are emulated (slow) and
int8 GEMMs are several times faster than float32 (benchmarks/results/levers-cpu-amd-epyc-f25m1-avx2.json);
on a Xeon with AMX, bf16 and int8 are native; which integer kernel wins (specdec's own,
:mod:`specdec.model.native`, oneDNN's, fbgemm's or torch's int4) can differ too. So on a CPU
``auto`` times every available variant (:mod:`specdec.model.calibration`: interleaved, medians,
cached per CPU model, flags and torch version) and keeps the fastest, preferring specdec's
kernels within a margin of it:

* **the verifier** on one verifier-sized layer (1536 -> 8960) at 1 row (verifier-only decoding)
  plus K+1 rows (one verification), batch-invariant as the verifier must be;
* **the draft** on its own shapes at 1 row (it decodes one token at a time and needs no batch
  invariance): one layer's four matmuls times its layer count, plus its output layer, which is a
  quarter of its weights;
* **specdec's prefetch setting** (how far ahead its x86 kernels prefetch weights, and how), where the
  verifier runs on specdec's kernels: a few settings on that kernel at the verifier's 1 and K+1 rows,
  the library's default kept within the margin of the fastest. It is one setting of the library,
  so the verifier's choice carries it (``Precision.prefetch``) and loading sets it.

GPUs take their native half precision (bf16 on CUDA where the GPU has it, else fp16; fp16 on
MPS); float32, the other half precision and int8 weight-only (where the torch build has a
kernel for the device) can be asked for. The choice and the reason are one line each
(``Precision.reason``), shown by the CLI, the app and the benchmarks. A choice turns into layers
in one step, :meth:`Precision.layers` (the layer class and its options on a device), which
:mod:`specdec.weights.loading` hands to the model it builds: the trail runs one way, settings ->
precision -> loading -> :mod:`specdec.model.kernels`.
"""
from __future__ import annotations

import platform
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from specdec.model import calibration, native
from specdec.model.kernels import (
    DenseLinear,
    Fp16Linear,
    Int4Linear,
    Int8DnnLinear,
    Int8Linear,
    Int8WeightOnlyLinear,
    PackedLinear,
    has_vnni,
    weight_only_int8_on,
)
from specdec.options import ConfigError, DecodeConfig

PRECISIONS = ("auto", "float32", "bfloat16", "float16", "int8", "int4")
KERNELS = ("specdec", "onednn", "fbgemm", "torch")  # the integer kernels, in the order preferred at equal speed


@dataclass(frozen=True)
class Precision:
    name: str                      # float32 | bfloat16 | float16 | int8 | int4
    reason: str                    # one line: why this one
    transposed: bool = False       # float32 only: compute small-row matmuls as (W @ x^T)^T
    kernel: str = ""               # int8: "specdec", "onednn" or "fbgemm"; int4: "specdec" or "torch";
                                   # "" is the first of those available here
    prefetch: native.Prefetch | None = None  # specdec's kernels' setting timed with this choice; None: not timed

    @property
    def label(self) -> str:
        """The variant, as calibration tables name it: "int8 onednn", "float32 transposed"..."""
        return " ".join([self.name] + (["transposed"] if self.transposed else []) + ([self.kernel] if self.kernel else []))

    @classmethod
    def from_label(cls, label: str, reason: str = "") -> Precision:
        name, *rest = label.split()
        return cls(name, reason, "transposed" in rest, next((r for r in rest if r in KERNELS), ""))

    @property
    def dense_dtype(self) -> torch.dtype:
        """dtype of the parts that stay dense (embeddings) and of the model on a GPU."""
        return {"float32": torch.float32, "float16": torch.float16}.get(self.name, torch.bfloat16)

    def layers(self, device: torch.device, batch_invariant: bool = True) -> Layers:
        """How a model's linear layers are made in this representation on ``device``: the layer
        class and its options, one choice for building and restoring alike. ``batch_invariant``
        matters for the CPU's int8 only: the verifier needs it (see :class:`Int8Linear`), the draft
        does not. On a GPU the dense ones are plain device tensors, and int8 is weight-only
        (:class:`Int8WeightOnlyLinear`), its activations in the device's half precision."""
        if device.type != "cpu":
            if self.name == "int8":
                half = torch.bfloat16 if device.type == "cuda" else torch.float16
                return Layers(Int8WeightOnlyLinear, device, {"device": device, "dtype": half}, {"dtype": half})
            return Layers(DenseLinear, device, {"dtype": self.dense_dtype, "device": device}, {})
        if self.name in ("float32", "bfloat16"):
            transposed = self.transposed and self.name == "float32"
            return Layers(DenseLinear, device, {"dtype": getattr(torch, self.name), "transposed": transposed},
                          {"transposed": transposed})
        if self.name == "int8":
            kernel = {"specdec": native.NativeInt8Linear, "onednn": Int8DnnLinear, "fbgemm": Int8Linear}[self.cpu_kernel]
            return Layers(kernel, device, {"batch_invariant": batch_invariant}, {"batch_invariant": batch_invariant})
        if self.name == "int4":
            return Layers({"specdec": native.NativeInt4Linear, "torch": Int4Linear}[self.cpu_kernel], device, {}, {})
        return Layers(Fp16Linear, device, {}, {})

    @property
    def cpu_kernel(self) -> str:
        """The integer kernel on a CPU: the one named, else specdec's where it is built, else torch's."""
        if self.kernel or self.name not in ("int8", "int4"):
            return self.kernel
        return "specdec" if native.available() else {"int8": "fbgemm", "int4": "torch"}[self.name]

    def cache_key(self, device: torch.device) -> str:
        """Which saved layers this precision can rebuild: the representation and its layout (specdec's
        kernels run their own; oneDNN's and fbgemm's int8 rebuild theirs from one; torch's int4 is
        packed for the CPU's ISA), and the device kind."""
        if device.type != "cpu":
            return f"{self.name}-{device.type}"
        if self.cpu_kernel == "specdec":
            return f"{self.name}-specdec"
        return self.name + (f"-{torch.backends.cpu.get_cpu_capability().lower()}" if self.name == "int4" else "")


@dataclass(frozen=True)
class Layers:
    """A representation's layer class on one device, with the options its ``from_weight`` and its
    ``from_state`` take: what a model is built from (:class:`specdec.model.qwen2.LeanQwen2`)."""

    kernel: type[PackedLinear]
    device: torch.device
    build_options: dict
    restore_options: dict

    def build(self, weight: torch.Tensor, bias: torch.Tensor | None) -> PackedLinear:
        """The layer for a float weight (out, in)."""
        if self.device.type != "cpu" and bias is not None:
            bias = bias.float().to(self.device)
        return self.kernel.from_weight(weight.float(), bias, **self.build_options)

    def restore(self, state: dict[str, torch.Tensor], bias: torch.Tensor | None) -> PackedLinear:
        """The layer :meth:`build` made, from its saved ``state()`` (on the device already)."""
        return self.kernel.from_state(state, bias, **self.restore_options)

    @property
    def maps_saved(self) -> bool:
        """Whether restored layers run on the saved tensors as they are, so the cached file can be
        memory-mapped rather than read (:class:`specdec.weights.packed.Reader`)."""
        return self.device.type == "cpu" and self.kernel.keeps_state


def cpuinfo() -> dict[str, str]:
    """The first processor's fields in /proc/cpuinfo ("model name", "cpu family", "flags", ...);
    empty where there is none (macOS, Windows)."""
    fields: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if not line.strip():
                break  # the first processor's block ends: the others repeat it
            key, _, value = line.partition(":")
            fields[key.strip()] = value.strip()
    except OSError:
        pass
    return fields


def cpu_description() -> dict:
    """CPU model and the flags that decide kernels; every benchmark JSON carries it."""
    info = cpuinfo()
    model, flags = info.get("model name") or platform.processor() or platform.machine(), info.get("flags", "").split()
    keep = ("avx2", "fma", "f16c", "avx512f", "avx512_bf16", "avx512_vnni", "avx_vnni", "amx_bf16", "amx_int8",
            "amx_tile")
    return {"model": model, "flags": [f for f in keep if f in flags], "isa": torch.backends.cpu.get_cpu_capability()}


def cpu_capabilities() -> dict:
    return {"native_bf16": bool(torch.ops.mkldnn._is_mkldnn_bf16_supported()),
            "fbgemm": "fbgemm" in torch.backends.quantized.supported_engines,
            "onednn_int8": hasattr(torch.ops.onednn, "qlinear_pointwise") and has_vnni(cpu_description()["flags"]),
            "specdec": native.available(),
            "isa": torch.backends.cpu.get_cpu_capability()}


def cpu_candidates(caps: dict | None = None) -> list[str]:
    """Representations with a native kernel here. bf16 only with native bf16 (emulated bf16 is
    slower than float32); float16 needs fbgemm (x86); int8 needs specdec's kernels, oneDNN with
    VNNI/AMX, or fbgemm where specdec's are not built; int4 specdec's kernels or torch's AVX2/AVX512 path."""
    return sorted({v.name for v in cpu_variants(caps)}, key=PRECISIONS.index)


def cpu_variants(caps: dict | None = None) -> list[Precision]:
    """Every kernel variant of every representation that runs natively here."""
    caps = caps or cpu_capabilities()
    out = [Precision("float32", ""), Precision("float32", "", transposed=True)]
    if caps["native_bf16"]:
        out.append(Precision("bfloat16", ""))
    if caps["fbgemm"]:
        out.append(Precision("float16", ""))
    if caps.get("specdec"):
        out.append(Precision("int8", "", kernel="specdec"))
    if caps.get("onednn_int8"):
        out.append(Precision("int8", "", kernel="onednn"))
    # fbgemm's int8 rests on torch's deprecated quantized tensors: offered only where specdec's
    # kernels are not built (calibration no longer picked it on any CPU measured once they were)
    if caps["fbgemm"] and not caps.get("specdec"):
        out.append(Precision("int8", "", kernel="fbgemm"))
    if caps.get("specdec"):
        out.append(Precision("int4", "", kernel="specdec"))
    if caps["isa"] in ("AVX2", "AVX512"):
        out.append(Precision("int4", "", kernel="torch"))
    return out


def draft_shapes(config) -> dict:
    """The draft's matmul shapes (out, in): one layer's four (q/k/v fused, o, gate/up fused,
    down), how many layers, and the output layer."""
    e, h = config.hidden_size, config.num_attention_heads
    d = getattr(config, "head_dim", None) or e // h
    g = getattr(config, "num_key_value_heads", None) or h
    i = config.intermediate_size
    return {"layer": [((h + 2 * g) * d, e), (e, h * d), (2 * i, e), (e, i)], "layers": config.num_hidden_layers,
            "head": (config.vocab_size, e)}


# The verifier is timed at 1 row and at the K+1 rows of the default K, whatever K a run asks for:
# loading does not depend on K, so one pair per process serves every run (the app's, the CLI's, a
# test session's) and a run at another K decodes with the same numbers.
CALIBRATION_K = DecodeConfig.k


def cpu_timings() -> dict[str, list[float]]:
    """The verifier's table (:func:`specdec.model.calibration.calibrate`), cached per CPU model, flags
    and torch version (seconds, once)."""
    return calibration.cached(["verifier", CALIBRATION_K], cpu_description(),
                              lambda: calibration.calibrate(cpu_variants(), CALIBRATION_K))


def prefetch_timings(variant: Precision) -> dict[str, list[float]]:
    """The prefetch settings' table on ``variant``, specdec's int8 or int4
    (:func:`specdec.model.calibration.calibrate_prefetch`), cached as the verifier's is."""
    return calibration.cached(["prefetch", variant.label, CALIBRATION_K], cpu_description(),
                              lambda: calibration.calibrate_prefetch(variant, CALIBRATION_K))


def draft_timings(shapes: dict) -> dict[str, list[float]]:
    """The draft's table, cached per CPU model, flags, torch version and draft shapes."""
    return calibration.cached(["draft", shapes], cpu_description(),
                              lambda: calibration.calibrate_draft(cpu_variants(), shapes))


def _listing(costs: dict[str, float]) -> str:
    return ", ".join(f"{n} {c:.2f}" for n, c in sorted(costs.items(), key=lambda kv: kv[1]))


# A variant must be this much faster than a preferred one (specdec's kernels: batch-invariant by
# construction, loaded as saved) to be chosen over it, so that noise cannot flip the choice.
MARGIN = 0.05


def _specdecs(label: str) -> bool:
    return label.endswith(" specdec")


def _winner(costs: dict[str, float], preferred=_specdecs) -> tuple[str, str]:
    """The label to take, and how it compares: the fastest, or a ``preferred`` one within MARGIN of it."""
    fastest = min(costs, key=costs.get)
    near = [n for n, c in costs.items() if c <= costs[fastest] * (1 + MARGIN)]
    best = min(near, key=lambda n: (not preferred(n), costs[n]))
    how = "fastest here" if best == fastest else f"within {MARGIN:.0%} of the fastest ({fastest}) and preferred"
    if best.endswith(" fbgemm") or best == "float16":
        how += " (on torch's deprecated quantized engine, kept only where it is measured fastest)"
    return best, how


def pick(timings: dict[str, list[float]], k: int, cpu_model: str, allowed: list[str] | None = None) -> Precision:
    """The verifier's variant with the lowest cost at 1 row plus K+1 rows (among ``allowed`` names)."""
    costs = {n: sum(t) for n, t in timings.items() if allowed is None or n.split()[0] in allowed}
    best, how = _winner(costs)
    shape = calibration.CALIBRATION_SHAPE
    reason = f"{best}: {how} at 1 + {k + 1} rows (ms per {shape[1]}x{shape[0]} layer: {_listing(costs)}) on {cpu_model}"
    return Precision.from_label(best, reason)


def pick_prefetch(timings: dict[str, list[float]], k: int) -> tuple[native.Prefetch, str]:
    """The prefetch setting with the lowest cost at 1 row plus K+1 rows, the library's default
    preferred within MARGIN of it (settings differ by a few percent: noise must not flip it)."""
    costs = {n: sum(t) for n, t in timings.items()}
    best, how = _winner(costs, preferred=lambda n: n == native.DEFAULT_PREFETCH.label)
    return native.Prefetch.from_label(best), f"prefetch {best}: {how} at 1 + {k + 1} rows (ms: {_listing(costs)})"


def with_prefetch(chosen: Precision) -> Precision:
    """``chosen`` with its prefetch setting timed (and said in its reason) where it runs on
    specdec's kernels; as it is elsewhere."""
    if chosen.cpu_kernel != "specdec":
        return chosen
    setting, why = pick_prefetch(prefetch_timings(replace(chosen, kernel="specdec")), CALIBRATION_K)
    return replace(chosen, prefetch=setting, reason=f"{chosen.reason}; {why}")


def pick_draft(timings: dict[str, list[float]], layers: int, cpu_model: str,
               allowed: list[str] | None = None) -> Precision:
    """The draft's variant with the lowest estimated matmul time per drafted token (among
    ``allowed`` names). 4-bit drafts are candidates: with specdec's int4 kernel an int4 draft
    agrees with the verifier's choices nearly as often as an int8 one and drafts faster (AMD EPYC
    Zen 4: benchmarks/results/throughput-cpu-amd-epyc-f25m17-avx512-vnni.json; docs/results.md)."""
    costs = {n: layers * t[0] + t[1] for n, t in timings.items() if allowed is None or n.split()[0] in allowed}
    best, how = _winner(costs)
    reason = (f"{best}: {how} for one drafted token (est. ms of its {layers} layers' and output layer's "
              f"matmuls at 1 row: {_listing(costs)}) on {cpu_model}")
    return Precision.from_label(best, reason)


def _check_name(device: torch.device, requested: str | None, field: str) -> str:
    requested = requested or "auto"
    if requested not in PRECISIONS:
        raise ConfigError(f"{field} must be one of {', '.join(PRECISIONS)} (got {requested!r})", field)
    if device.type == "cpu" and requested != "auto" and requested not in cpu_candidates():
        raise ConfigError(f"{field} {requested!r} has no native kernel on this CPU "
                          f"({cpu_description()['isa']}); available: {', '.join(cpu_candidates())}", field)
    return requested


def native_half(device: torch.device) -> tuple[str, str]:
    """The GPU's half precision and why: bf16 where CUDA has it natively (compute capability 8.0
    and up: Ampere, Hopper...), else fp16 (older CUDA GPUs, and MPS, where fp16 is the fast path)."""
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        if torch.cuda.is_bf16_supported():
            return "bfloat16", f"native bf16 on {torch.cuda.get_device_name(device)} (compute capability {major}.{minor})"
        return "float16", f"no native bf16 on {torch.cuda.get_device_name(device)} (compute capability {major}.{minor})"
    return "float16", f"{device.type}'s native half precision"


def gpu_candidates(device: torch.device) -> list[str]:
    """Representations with a kernel on this GPU: the dense ones always, int8 weight-only where
    this torch build has ``_weight_int8pack_mm`` for the device (a capability check)."""
    return ["float32", "bfloat16", "float16"] + (["int8"] if weight_only_int8_on(device) else [])


def _gpu(device: torch.device, requested: str, field: str) -> Precision:
    available = gpu_candidates(device)
    if requested != "auto" and requested not in available:
        raise ConfigError(f"{field} {requested!r} has no kernel on {device.type} in this torch build; "
                          f"use auto or one of {', '.join(available)}", field)
    if requested != "auto":
        return Precision(requested, f"{requested}: requested on {device.type}")
    name, why = native_half(device)
    return Precision(name, f"{name}: {why}; weights, KV cache and sampling on the device")


def choose(device: torch.device, requested: str | None = "auto") -> Precision:
    """The verifier's. ``auto``: the measured fastest on a CPU, native half precision on a GPU;
    a name: that representation, in its fastest variant here."""
    requested = _check_name(device, requested, "precision")
    if device.type != "cpu":
        return _gpu(device, requested, "precision")
    chosen = pick(cpu_timings(), CALIBRATION_K, cpu_description()["model"], None if requested == "auto" else [requested])
    return with_prefetch(chosen if requested == "auto" else replace(chosen, reason=f"{chosen.label}: requested"))


def choose_draft(device: torch.device, requested: str | None, config) -> Precision:
    """The draft's, measured on its own shapes (see the module docstring); as :func:`choose` else."""
    requested = _check_name(device, requested, "draft_precision")
    if device.type != "cpu":
        return _gpu(device, requested, "draft_precision")
    shapes = draft_shapes(config)
    chosen = pick_draft(draft_timings(shapes), shapes["layers"], cpu_description()["model"],
                        None if requested == "auto" else [requested])
    return chosen if requested == "auto" else replace(chosen, reason=f"{chosen.label}: requested")
