"""Linear layers that know their representation, after gpt-fast's ``quantize.py``.

Speculative decoding pays off only if (a) a verifier forward over K+1 rows costs about what a
1-row forward costs and (b) the draft is cheap. On a 2-core CPU both hinge on the matmul kernel,
and the fastest kernel differs by machine (AVX2 without native bf16, AVX512-BF16, AMX, Apple),
so each representation lives behind one small interface and :mod:`specdec.model.precision` picks one
per machine by capability checks and a cached one-time measurement. Representations:

* ``float32``      ``F.linear``; on some CPUs ``(W @ x^T)^T`` takes a faster MKL path for 2-16
                   rows, so the orientation is chosen by measurement (``transposed``).
* ``bfloat16``     dense bf16 weights and activations (only where the CPU has native bf16).
* ``int8``         weights int8 per output channel, activations int8 per row (the same W8A8 scheme
                   as llama.cpp's Q8 activation dot products), on one of two integer GEMMs chosen
                   by measurement: oneDNN's (``Int8DnnLinear``: plain int8 tensors, VNNI/AMX, the
                   op torch's own int8 inference uses) or fbgemm's (``Int8Linear``: it rests on
                   torch's quantized-tensor type, deprecated in torch 2.10+, so it is offered only
                   where specdec's own kernels are not built). Integer
                   accumulation is exact, and each row gets its own activation scale, so a row's
                   result does not depend on which other rows share the batch: the verifier's
                   K+1-row forward and its 1-row forward agree exactly in these layers.
* ``float16``      fp16 weights, float32 activations and accumulation: fbgemm's packed GEMM.
* ``int8 weight-only`` (GPUs, where the build has the kernel) int8 weights per output channel,
                   half-precision activations: ``torch._weight_int8pack_mm``.
* ``int4``         weights int4 in groups of 32 with a scale and a minimum per group (GGUF Q4_K's
                   layout), torch's ``_weight_int4pack_mm_for_cpu`` with bf16 activations.

Every module exposes the weights it really holds as plain tensors (``state``) and can be rebuilt
from them (``from_state``): the tests compare each against its dequantised reference.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

SMALL_ROWS = 64  # beyond this, F.linear's ordinary gemm is efficient on every CPU we met
GROUP = 32       # int4 group size: one scale and one minimum per 32 weights, as in GGUF Q4_K


class PackedLinear(torch.nn.Module):
    """Interface: ``forward`` maps (..., in) float32 to (..., out) float32, bias included;
    ``state`` round-trips the weights (the bias travels separately)."""

    kind = "?"
    keeps_state = False  # whether from_state runs on the given tensors as they are (a mapped file's pages)
    invariant = False    # whether a row's result is bitwise independent of the other rows of its call

    def __init__(self, in_features: int, out_features: int, bias: torch.Tensor | None):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.bias = None if bias is None else bias.detach().float().contiguous()

    @classmethod
    def from_weight(cls, weight: torch.Tensor, bias: torch.Tensor | None) -> PackedLinear:
        raise NotImplementedError

    def state(self) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    @classmethod
    def from_state(cls, state: dict[str, torch.Tensor], bias: torch.Tensor | None) -> PackedLinear:
        raise NotImplementedError

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 2:  # the lean forward's only case: no reshapes, a few ops fewer per layer
            return self._matmul(x)
        y = self._matmul(x.reshape(-1, self.in_features))                     # (rows, out)
        return y.reshape(*x.shape[:-1], self.out_features)

    def _matmul(self, x: torch.Tensor) -> torch.Tensor:
        """(rows, in) float32 -> (rows, out) float32 with the bias added."""
        raise NotImplementedError

    def fused(self, x: torch.Tensor, norm: tuple[torch.Tensor, float] | None = None, gated: bool = False,
              residual: torch.Tensor | None = None) -> torch.Tensor:
        """A transformer layer's steps around this matmul, (rows, in) -> (rows, out): first
        ``gated`` (x is (rows, 2 in): silu(x[:, :in]) * x[:, in:]), then ``norm`` = (weight, eps)
        (rms_norm), the matmul, then ``+ residual``. Here in torch ops; a kernel may do them in
        its own pass (:class:`specdec.model.native.NativeInt8Linear`)."""
        if gated:
            g, u = x.chunk(2, -1)
            x = F.silu(g) * u
        if norm is not None:
            x = F.rms_norm(x, (x.shape[-1],), norm[0], norm[1])
        y = self(x)
        return y if residual is None else residual + y

    def _options(self) -> dict:
        """The keyword arguments of ``from_state`` that rebuild this very variant."""
        return {}

    def clone(self) -> PackedLinear:
        """The same layer in fresh memory (calibration times copies so that none is in cache)."""
        return self.from_state({k: v.clone() for k, v in self.state().items()}, self.bias, **self._options())

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.state().values())

    def extra_repr(self) -> str:
        return f"{self.kind}, in={self.in_features}, out={self.out_features}, bias={self.bias is not None}"


class DenseLinear(PackedLinear):
    """float32 or bfloat16 weights; ``transposed`` computes (W @ x^T)^T for small row counts."""

    keeps_state = True

    def __init__(self, weight: torch.Tensor, bias, transposed: bool = False):
        super().__init__(weight.shape[1], weight.shape[0], bias)
        self.weight = weight.contiguous()
        self.transposed = transposed
        self.kind = str(weight.dtype).removeprefix("torch.") + (" (W @ x^T)^T" if transposed else "")

    @classmethod
    def from_weight(cls, weight, bias, dtype: torch.dtype = torch.float32, transposed: bool = False,
                    device: torch.device | str = "cpu"):
        return cls(weight.to(device, dtype), bias, transposed)

    def state(self):
        return {"weight": self.weight}

    @classmethod
    def from_state(cls, state, bias, transposed: bool = False):
        return cls(state["weight"], bias, transposed)

    def _options(self):
        return {"transposed": self.transposed}

    def _matmul(self, x):
        x = x.to(self.weight.dtype)
        if self.transposed and x.shape[0] <= SMALL_ROWS:
            y = (self.weight @ x.T).T.contiguous()  # callers may view the rows' last dim as pairs
            return (y if self.bias is None else y + self.bias).float()
        bias = None if self.bias is None else self.bias.to(self.weight.dtype)
        return F.linear(x, self.weight, bias).float()


class _Int8(PackedLinear):
    """What both int8 kernels share: built from int8 weights (out, in) and one scale per output
    row, ``batch_invariant`` kept for the interface."""

    @classmethod
    def from_weight(cls, weight, bias, batch_invariant: bool = True):
        return cls(*quantize_rows(weight), bias, batch_invariant)

    @classmethod
    def from_state(cls, state, bias, batch_invariant: bool = True):
        return cls(state["qweight"], state["scales"], bias, batch_invariant)

    def _options(self):
        return {"batch_invariant": self.batch_invariant}

    @property
    def invariant(self) -> bool:
        return self.batch_invariant


class Int8Linear(_Int8):
    """W8A8 through fbgemm: int8 weights per output channel, activations quantised per row.

    fbgemm's dynamic linear picks one activation scale for the whole input from its min and max.
    With ``batch_invariant`` (the verifier), dividing each row by its own max |x| and appending a
    pin row holding +1 and -1 fixes that range at [-1, 1], so each row is quantised on its own
    scale (multiplied back afterwards) and the result of a row is independent of the batch. The
    draft decodes one row at a time and its numbers need not match anything, so it skips those
    six small ops. ``reduce_range`` keeps activations to 7 bits so AVX2's 16-bit pairwise
    products cannot saturate.
    """

    kind = "int8 (W8A8, fbgemm)"

    def __init__(self, qweight: torch.Tensor, scales: torch.Tensor, bias, batch_invariant: bool = True):
        super().__init__(qweight.shape[1], qweight.shape[0], bias)
        self.batch_invariant = batch_invariant
        q = torch._make_per_channel_quantized_tensor(
            qweight.contiguous(), scales.double(), torch.zeros(scales.shape, dtype=torch.long), 0)
        # the only copy of the weights; the plain path adds the bias inside fbgemm
        self._packed = torch.ops.quantized.linear_prepack(q, None if batch_invariant else self.bias)
        self._pin = torch.zeros(1, self.in_features)
        self._pin[0, :2] = torch.tensor([1.0, -1.0])


    def state(self):
        q, _ = torch.ops.quantized.linear_unpack(self._packed)
        return {"qweight": q.int_repr(), "scales": q.q_per_channel_scales().float()}


    def _matmul(self, x):
        if not self.batch_invariant:
            return torch.ops.quantized.linear_dynamic(x, self._packed, True)
        s = x.abs().amax(-1, keepdim=True).clamp_min(1e-30)                          # (rows, 1)
        xn = torch.cat([x / s, self._pin])                                           # (rows+1, in)
        y = torch.ops.quantized.linear_dynamic(xn, self._packed, True)[:-1]          # (rows, out)
        return y * s if self.bias is None else torch.addcmul(self.bias, y, s)


def has_vnni(flags) -> bool:
    """int8 dot products that accumulate straight into 32 bits (no 16-bit pairwise sums to saturate)."""
    return bool({"avx512_vnni", "avx_vnni", "amx_int8"} & set(flags))


class Int8DnnLinear(_Int8):
    """W8A8 through oneDNN's int8 GEMM (``torch.ops.onednn.qlinear_pointwise``, VNNI or AMX), on
    plain int8 tensors: none of torch's deprecated quantized-tensor functions.

    Our code quantises each activation row on its own scale, x_q = round(127 x / max|x|), and
    multiplies the row's scale back afterwards; oneDNN accumulates x_q . w_q exactly in int32 and
    applies the per-channel weight scale elementwise. So a row's result never depends on the
    other rows of the batch (the verifier's invariance), with no pin row. Offered only on CPUs
    with VNNI or AMX (:func:`has_vnni`): without them the u8*s8 pairwise sums are 16-bit and can
    saturate; there fbgemm's 7-bit path runs instead.
    """

    kind = "int8 (W8A8, oneDNN)"

    def __init__(self, qweight: torch.Tensor, scales: torch.Tensor, bias, batch_invariant: bool = True):
        super().__init__(qweight.shape[1], qweight.shape[0], bias)
        self.batch_invariant = batch_invariant  # always true of this kernel; kept for the interface
        self.scales = scales.float().contiguous()                                    # (out,)
        self._packed = torch.ops.onednn.qlinear_prepack(qweight.contiguous(), None)  # the only copy: oneDNN's layout
        self._zeros = torch.zeros(qweight.shape[0], dtype=torch.long)


    def state(self):
        return {"qweight": self._packed.to_dense().t().contiguous(), "scales": self.scales}


    def _matmul(self, x):
        s = x.abs().amax(-1, keepdim=True).clamp_min_(1e-30).div_(127)               # (rows, 1)
        xq = torch.div(x, s).round_().to(torch.int8)                                 # (rows, in), |xq| <= 127
        y = torch.ops.onednn.qlinear_pointwise(xq, 1.0, 0, self._packed, self.scales, self._zeros, None,
                                               1.0, 0, torch.float32, "none", [], "")   # (rows, out)
        return y.mul_(s) if self.bias is None else torch.addcmul(self.bias, y, s)


def quantize_rows(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, in) float -> int8 weights and one scale per output row (symmetric, round to nearest)."""
    qweight = torch.empty(weight.shape, dtype=torch.int8)
    scales = torch.empty(weight.shape[0])                                              # (out,)
    # In slices of rows: whole-tensor temporaries of a 151936-row output layer would be GBs.
    for r in range(0, weight.shape[0], 4096):
        w = weight[r:r + 4096].float()
        scales[r:r + 4096] = (w.abs().amax(1) / 127).clamp_min(1e-12)
        qweight[r:r + 4096] = (w / scales[r:r + 4096, None]).round_().clamp_(-127, 127)
    return qweight, scales


class Fp16Linear(PackedLinear):
    """float16 weights, float32 activations and accumulation: fbgemm's packed fp16 GEMM. Near
    float32 results at half the bytes; used where int8 activations lose too much."""

    kind = "float16 weights (fbgemm)"

    def __init__(self, weight: torch.Tensor, bias):
        super().__init__(weight.shape[1], weight.shape[0], bias)
        self._packed = torch.ops.quantized.linear_prepack_fp16(weight.float(), self.bias)  # stored as fp16

    @classmethod
    def from_weight(cls, weight, bias):
        return cls(weight, bias)

    def state(self):
        w, _ = torch.ops.quantized.linear_unpack_fp16(self._packed)
        return {"weight16": w.to(torch.float16)}

    @classmethod
    def from_state(cls, state, bias):
        return cls(state["weight16"], bias)

    def _matmul(self, x):
        return torch.ops.quantized.linear_dynamic_fp16(x, self._packed)


class Int4Linear(PackedLinear):
    """Weight-only int4, groups of 32 along the input with a scale and a minimum each
    (w = scale * q + min, q in 0..15), torch's CPU int4 kernel on bf16 activations."""

    kind = "int4 (group 32, bf16 activations)"

    def __init__(self, packed: torch.Tensor, scales_and_zeros: torch.Tensor, in_features: int, bias):
        super().__init__(in_features, packed.shape[0], bias)
        self.packed, self.scales_and_zeros = packed.contiguous(), scales_and_zeros.contiguous()

    @classmethod
    def from_weight(cls, weight, bias):
        out, inp = weight.shape
        if inp % GROUP:
            raise ValueError(f"int4 needs in_features divisible by {GROUP} (got {inp})")
        w = weight.reshape(out, inp // GROUP, GROUP)                                 # (out, G, 32)
        lo, hi = w.amin(-1, keepdim=True), w.amax(-1, keepdim=True)
        scale = ((hi - lo) / 15).clamp_min(1e-12)
        q = ((w - lo) / scale).round().clamp(0, 15).to(torch.int32).reshape(out, inp)
        # torch's layout: w = (q - 8) * scale + zero, so zero = min + 8 * scale.
        sz = torch.stack([scale[..., 0], (lo + 8 * scale)[..., 0]], -1)              # (out, G, 2)
        packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1)            # (out, in/2) uint8
        return cls(packed, sz.transpose(0, 1).to(torch.bfloat16), inp, bias)

    def state(self):
        return {"packed": self.packed, "scales_and_zeros": self.scales_and_zeros}

    @classmethod
    def from_state(cls, state, bias):
        return cls(state["packed"], state["scales_and_zeros"], state["packed"].shape[1] * 2, bias)

    def _matmul(self, x):
        y = torch.ops.aten._weight_int4pack_mm_for_cpu(
            x.to(torch.bfloat16), self.packed, GROUP, self.scales_and_zeros).float()
        return y if self.bias is None else y + self.bias


def weight_only_int8_on(device: torch.device) -> bool:
    """Whether this torch build has the weight-only int8 matmul for ``device``: a capability check
    against the kernel registry, not a guess from the device's name."""
    key = {"cpu": "CPU", "cuda": "CUDA", "mps": "MPS"}.get(device.type)
    return bool(key) and hasattr(torch, "_weight_int8pack_mm") and \
        torch._C._dispatch_has_kernel_for_dispatch_key("aten::_weight_int8pack_mm", key)


class Int8WeightOnlyLinear(PackedLinear):
    """int8 weights with one scale per output row, activations in half precision:
    y = (x @ w_q^T) * scale by ``torch._weight_int8pack_mm``. Half the bytes of bf16 weights, for
    devices whose memory bandwidth sets the speed; not batch-invariant by itself (a GPU's verifier
    gets its invariance from padding, :mod:`specdec.model.qwen2`)."""

    kind = "int8 weight-only"

    def __init__(self, qweight: torch.Tensor, scales: torch.Tensor, bias, dtype: torch.dtype = torch.bfloat16):
        super().__init__(qweight.shape[1], qweight.shape[0], bias)
        self.qweight, self.dtype = qweight.contiguous(), dtype
        self.scales = scales.to(dtype).contiguous()                                  # (out,)

    @classmethod
    def from_weight(cls, weight, bias, device: torch.device | str = "cpu", dtype: torch.dtype = torch.bfloat16):
        q, s = quantize_rows(weight)
        return cls(q.to(device), s.to(device), bias, dtype)

    def state(self):
        return {"qweight": self.qweight, "scales": self.scales.float()}

    @classmethod
    def from_state(cls, state, bias, dtype: torch.dtype = torch.bfloat16):
        return cls(state["qweight"], state["scales"], bias, dtype)

    def _options(self):
        return {"dtype": self.dtype}

    def _matmul(self, x):
        y = torch._weight_int8pack_mm(x.to(self.dtype), self.qweight, self.scales).float()
        return y if self.bias is None else y + self.bias
