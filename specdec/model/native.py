"""specdec's own int8 and int4 CPU kernels for the decode regime (1 to ~16 rows), as layers.

A verification of K+1 tokens pays only while it costs about what decoding one token costs. On a
CPU a decode step is bound by reading the weights, so the kernel in ``specdec/model/csrc/qlinear.cpp``
loads each block of weights once and uses it for every row of the call (llama.cpp's tiling), on
the CPU's integer dot products: AVX512-VNNI, AVX-VNNI, or AVX2, chosen at run time. Its weights'
runtime form is a plain tensor, so the cache stores exactly that and a start maps it from disk:
nothing is repacked (:mod:`specdec.weights.packed`).

The arithmetic is exact integer accumulation with one activation scale per row (int8), and for
int4 float sums over groups of 32 in a fixed order, so each row's result is bitwise independent
of how many rows share the call and of the instruction set (``tests/model/test_kernels.py`` checks both,
at 1..16 rows and on every path this CPU has, against the dequantised reference).

The library is compiled by the package's build (``pip install --no-build-isolation -e .``, which
``make app`` and ``make test`` run). Where it is missing (no compiler, or another install route)
:func:`status` says why, and the precision choice falls back to torch's kernels. :func:`disabled`
switches it off for a while on a machine that has it, so that those fallbacks (torch's linears, the
lean forward's own attention) are tested everywhere (``tests/model/test_fallback.py``).

On x86 the kernels prefetch the weights ahead of the one being read: how far and with which hint
(:class:`Prefetch`) is one setting of the library for the process, timed per machine by the
calibration and set when a pair is loaded. It changes when bytes arrive, never the results.
"""
from __future__ import annotations

import contextlib
import enum
import functools
from dataclasses import dataclass
from pathlib import Path

import torch

from specdec.model.kernels import PackedLinear, quantize_rows

BLOCK = 16        # output channels per weight block
GROUP = 32        # int4 inputs per scale and minimum
Q4_BYTES = 320    # one int4 block of 16 channels x 32 inputs: 256 bytes of nibbles, 16 + 16 float16
ISA_NAMES = {1: "scalar", 2: "AVX2", 3: "AVX-VNNI", 4: "AVX512-VNNI"}
SLICE = 4096      # weight rows packed at a time (a 151936-row output layer whole would be GBs of temporaries)


_switched_off = False  # within disabled()


def status() -> tuple[bool, str]:
    """(whether the kernels are in use, the instruction set they use here or why they are not)."""
    if _switched_off:
        return False, "specdec's C++ kernels are switched off (specdec.model.native.disabled())"
    return _load()


@contextlib.contextmanager
def disabled():
    """Within the block this machine behaves as one without the kernels (a GPU, macOS, ARM, no
    compiler): precisions choose torch's kernels, the lean forward attends with torch's, and a layer
    built on specdec's kernels raises rather than run them."""
    global _switched_off
    before, _switched_off = _switched_off, True
    try:
        yield
    finally:
        _switched_off = before


@functools.cache
def _load() -> tuple[bool, str]:
    here = Path(__file__).resolve().parent
    libs = sorted(here.glob("_qlinear*.so")) + sorted(here.glob("_qlinear*.pyd"))
    if not libs:
        return False, ("specdec's C++ kernels are not built (no compiler when the package was installed?); "
                       "build them with: pip install --no-build-isolation --no-deps -e .")
    try:
        torch.ops.load_library(str(libs[0]))
        return True, ISA_NAMES[max(i for i in ISA_NAMES if int(torch.ops.specdec.isas()) >> i & 1)]
    except (OSError, RuntimeError) as e:
        return False, f"specdec's C++ kernels do not load ({str(e).splitlines()[0][:160]}); rebuild them"


def available() -> bool:
    return status()[0]


def ops():
    """``torch.ops.specdec``, the library loaded; a clear error where it is not built."""
    loaded, why = status()
    if not loaded:
        raise RuntimeError(why)
    return torch.ops.specdec


def isas() -> list[int]:
    """The instruction-set paths this CPU runs (1 scalar, 2 AVX2, 3 AVX-VNNI, 4 AVX512-VNNI)."""
    mask = int(ops().isas())
    return [i for i in ISA_NAMES if mask >> i & 1]


def best_isa() -> int:
    return max(isas())


class Hint(enum.IntEnum):
    """_mm_prefetch's hints, numbered as the library takes them."""

    T0 = 0   # into every cache level
    T1 = 1   # into L2 and the levels beyond it
    NTA = 2  # non-temporal: near the core, kept out of the outer caches where the CPU can


MAX_PREFETCH = 1 << 20  # bytes: the library refuses more


@dataclass(frozen=True)
class Prefetch:
    """How far ahead of the weight being read the x86 kernels prefetch (bytes; 0: no software
    prefetch), and with which hint."""

    distance: int
    hint: Hint = Hint.T0

    def __post_init__(self):
        if not (isinstance(self.distance, int) and 0 <= self.distance <= MAX_PREFETCH):
            raise ValueError(f"Prefetch.distance must be an integer in 0..{MAX_PREFETCH} bytes (got {self.distance!r})")
        try:
            object.__setattr__(self, "hint", Hint(self.hint))  # a plain number too, as the library reports it
        except ValueError:
            raise ValueError(f"Prefetch.hint must be one of {', '.join(Hint.__members__)} (got {self.hint!r})") from None

    @property
    def label(self) -> str:
        """As calibration tables and reasons name it: "4096 B T0", or "off"."""
        return f"{self.distance} B {self.hint.name}" if self.distance else "off"

    @classmethod
    def from_label(cls, label: str) -> Prefetch:
        if label == "off":
            return cls(0)
        distance, _, hint = label.split()
        return cls(int(distance), Hint[hint])


DEFAULT_PREFETCH = Prefetch(4096, Hint.T0)  # the library's own until set (qlinear.cpp)
# What the calibration times: none, and each distance with the hint that keeps the weights in
# every cache level or (NTA) out of the outer ones, since a forward reads each weight once.
PREFETCH_CANDIDATES = [Prefetch(0)] + [Prefetch(d, h) for d in (1024, 2048, 4096, 8192) for h in (Hint.T0, Hint.NTA)]


def set_prefetch(setting: Prefetch) -> None:
    """Every later call of the kernels, from any thread, prefetches so (x86; elsewhere it is kept
    and does nothing)."""
    ops().set_prefetch(setting.distance, int(setting.hint))


def prefetch() -> Prefetch:
    """The library's setting now."""
    distance, hint = ops().prefetch()
    return Prefetch(int(distance), int(hint))


def vector_attention(head_dim: int) -> bool:
    """Whether specdec's attention op runs a vector loop for this head size here (AVX2, and the
    head sizes of the models we run); elsewhere it would loop in scalar code (aarch64, other head
    sizes), slower than torch's attention, which then runs instead."""
    return available() and _attention_simd(head_dim)


@functools.cache
def _attention_simd(head_dim: int) -> bool:  # asked before every forward: the library's answer never changes
    return bool(ops().attention_simd(head_dim))


def _padded(n: int, to: int) -> int:
    return -(-n // to) * to


def pack_int8(qweight: torch.Tensor) -> torch.Tensor:
    """(N, K) int8 -> (N/16, K/4, 64) blocks, N and K padded with zeros: byte c*4+t of block
    (b, j) is qweight[16b + c, 4j + t]."""
    n, k = qweight.shape
    out = torch.zeros(_padded(n, BLOCK), _padded(k, 4), dtype=torch.int8)
    out[:n, :k] = qweight
    return out.reshape(-1, BLOCK, out.shape[1] // 4, 4).transpose(1, 2).reshape(-1, out.shape[1] // 4, 64).contiguous()


def unpack_int8(blocks: torch.Tensor, n: int, k: int) -> torch.Tensor:
    return blocks.reshape(blocks.shape[0], -1, BLOCK, 4).transpose(1, 2).reshape(-1, blocks.shape[1] * 4)[:n, :k]


def quantize_int4(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(N, K) float, K a multiple of 32 -> q (N, K/32, 32) uint8 in 0..15, d and m (N, K/32)
    float16, with w ~ d * q + m (asymmetric, the group's minimum and maximum; GGUF Q4_K's form).
    q is rounded against the float16 d and m that are stored, so it is the best q for them."""
    w = weight.float().reshape(weight.shape[0], -1, GROUP)                            # (N, G, 32)
    lo, hi = w.amin(-1), w.amax(-1)                                                   # (N, G)
    d = ((hi - lo) / 15).to(torch.float16)
    m = lo.to(torch.float16)
    dd = d.float()
    q = torch.where(dd[..., None] > 0, (w - m.float()[..., None]) / dd.clamp_min(1e-30)[..., None], 0.0)
    return q.round_().clamp_(0, 15).to(torch.uint8), d, m


def pack_int4(q: torch.Tensor, d: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """q (N, G, 32), d and m (N, G) -> (N/16, G, 320) uint8: per block of 16 channels and group,
    4 vectors of 64 bytes (byte c*4+t of vector v: q[.., 8v + t] low nibble, q[.., 8v+4+t] high
    nibble), then the 16 d and the 16 m as float16."""
    n, g = d.shape
    npad = _padded(n, BLOCK)
    qp = torch.zeros(npad, g, GROUP, dtype=torch.uint8)
    qp[:n] = q
    dm = torch.zeros(2, npad, g, dtype=torch.float16)
    dm[0, :n], dm[1, :n] = d, m
    quads = qp.reshape(npad // BLOCK, BLOCK, g, 4, 2, 4)                              # (b, c, g, v, half, t)
    nibbles = (quads[..., 0, :] | (quads[..., 1, :] << 4)).permute(0, 2, 3, 1, 4)   # (b, g, v, c, t)
    scales = dm.reshape(2, npad // BLOCK, BLOCK, g).permute(1, 3, 0, 2).contiguous()  # (b, g, 2, 16)
    return torch.cat([nibbles.reshape(npad // BLOCK, g, 256),
                      scales.view(torch.uint8).reshape(npad // BLOCK, g, 64)], -1).contiguous()


def unpack_int4(packed: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The inverse of :func:`pack_int4`: q (n, G, 32), d and m (n, G)."""
    b, g = packed.shape[:2]
    nib = packed[..., :256].reshape(b, g, 4, BLOCK, 4).permute(0, 3, 1, 2, 4)         # (b, c, g, v, t)
    q = torch.stack([nib & 0x0F, nib >> 4], -2).reshape(b * BLOCK, g, GROUP)          # (N, G, 32)
    dm = packed[..., 256:].contiguous().view(torch.float16).reshape(b, g, 2, BLOCK).permute(2, 0, 3, 1)
    dm = dm.reshape(2, b * BLOCK, g)
    return q[:n], dm[0, :n], dm[1, :n]


class Native(PackedLinear):
    """What both layers share: the library's instruction set (``isa``: 0 the best here, or one of
    :data:`ISA_NAMES` for the tests), the real (unpadded) shape carried in ``state``."""

    keeps_state = True
    invariant = True

    def __init__(self, in_features: int, out_features: int, bias, isa: int = 0):
        super().__init__(in_features, out_features, bias)
        self.isa = isa
        self.kind = f"{self.kind} {ISA_NAMES[isa or best_isa()]}"

    def _shape(self) -> torch.Tensor:
        return torch.tensor([self.out_features, self.in_features])

    def _options(self):
        return {"isa": self.isa}

    def _matmul(self, x):
        return self.fused(x)

    def fused(self, x, norm=None, gated=False, residual=None):
        """As :meth:`PackedLinear.fused`, all of it in the kernel's one pass over the rows."""
        weight, eps = norm if norm is not None else (None, 0.0)
        return self._call(x.float().contiguous(), weight, float(eps), gated,
                          None if residual is None else residual.contiguous())


class NativeInt8Linear(Native):
    """W8A8: int8 weights per output channel (symmetric), int8 activations per row, exact int32
    sums; batch-invariant whatever the rows (so ``batch_invariant`` is accepted and ignored)."""

    kind = "int8 (W8A8, specdec)"

    def __init__(self, blocks: torch.Tensor, scales: torch.Tensor, shape: torch.Tensor, bias, isa: int = 0):
        super().__init__(int(shape[1]), int(shape[0]), bias, isa)
        self.blocks, self.scales = blocks, scales                                      # (N/16, K/4, 64), (N/16*16,)

    @classmethod
    def from_weight(cls, weight, bias, batch_invariant: bool = True, isa: int = 0):
        n, k = weight.shape
        blocks = torch.empty(_padded(n, BLOCK) // BLOCK, _padded(k, 4) // 4, 64, dtype=torch.int8)
        scales = torch.zeros(_padded(n, BLOCK))
        for r in range(0, n, SLICE):  # SLICE is a multiple of BLOCK: slices fill whole blocks
            q, s = quantize_rows(weight[r:r + SLICE])
            blocks[r // BLOCK:(r + len(q) + BLOCK - 1) // BLOCK] = pack_int8(q)
            scales[r:r + len(q)] = s
        return cls(blocks, scales, torch.tensor([n, k]), bias, isa)

    def state(self):
        return {"blocks": self.blocks, "scales": self.scales, "shape": self._shape()}

    @classmethod
    def from_state(cls, state, bias, batch_invariant: bool = True, isa: int = 0):
        return cls(state["blocks"], state["scales"], state["shape"], bias, isa)

    def dequantized(self) -> torch.Tensor:
        """The float weights this layer multiplies by: (out, in)."""
        q = unpack_int8(self.blocks, self.out_features, self.in_features)
        return q.float() * self.scales[: self.out_features, None]

    def weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The weights as the ``decoder_layer`` op takes them: blocks and scales."""
        return self.blocks, self.scales

    def _call(self, x, norm, eps, gated, residual):
        return ops().int8_linear(x, self.blocks, self.scales, self.bias, self.out_features, self.isa, norm, eps,
                                 gated, residual)


class NativeInt4Linear(Native):
    """Weight-only int4 in groups of 32 with a float16 scale and minimum (GGUF Q4_K's form), int8
    activations per row; exact integer sums within a group, group sums added in a fixed order."""

    kind = "int4 (group 32, specdec)"

    def __init__(self, packed: torch.Tensor, shape: torch.Tensor, bias, isa: int = 0):
        super().__init__(int(shape[1]), int(shape[0]), bias, isa)
        self.packed = packed                                                           # (N/16, K/32, 320)

    @classmethod
    def from_weight(cls, weight, bias, isa: int = 0):
        n, k = weight.shape
        if k % GROUP:
            raise ValueError(f"int4 needs in_features divisible by {GROUP} (got {k})")
        packed = torch.empty(_padded(n, BLOCK) // BLOCK, k // GROUP, Q4_BYTES, dtype=torch.uint8)
        for r in range(0, n, SLICE):
            part = pack_int4(*quantize_int4(weight[r:r + SLICE]))
            packed[r // BLOCK:r // BLOCK + len(part)] = part
        return cls(packed, torch.tensor([n, k]), bias, isa)

    def state(self):
        return {"packed": self.packed, "shape": self._shape()}

    @classmethod
    def from_state(cls, state, bias, isa: int = 0):
        return cls(state["packed"], state["shape"], bias, isa)

    def dequantized(self) -> torch.Tensor:
        q, d, m = unpack_int4(self.packed, self.out_features)
        return (q.float() * d.float()[..., None] + m.float()[..., None]).reshape(self.out_features, -1)

    def weights(self) -> tuple[torch.Tensor, None]:
        """The weights as the ``decoder_layer`` op takes them: the blocks, no scales (int4)."""
        return self.packed, None

    def _call(self, x, norm, eps, gated, residual):
        return ops().int4_linear(x, self.packed, self.bias, self.out_features, self.isa, norm, eps, gated, residual)
