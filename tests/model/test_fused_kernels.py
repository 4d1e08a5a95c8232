"""specdec's fused kernels (specdec/model/csrc/qlinear.cpp) against torch's own ops: every prologue
(the SiLU gate, rms_norm) and epilogue (bias, residual) of ``PackedLinear.fused``, on every
instruction-set path this CPU runs, for int8 and int4 layers, at K a multiple of 32 and not, at 1
to 7 rows.

The reference is torch in float64 on the weights the layer really holds (``dequantized()``). The
kernel differs from it by its int8 activations alone: each input of a row is rounded to within
half a step, max|x| / 127 / 2 (x after the prologue), so each output lies within that times
sum_k |w_nk| of the reference, plus float32 rounding. The bound is a few percent of an output; a
SiLU with its sign flipped, a bias dropped, a residual added twice, a norm without its weight or
a term of the sums left out moves outputs by far more (each was planted in the kernel and caught;
scripts/mutants.py keeps some of them)."""
import itertools

import pytest
import torch
import torch.nn.functional as F

from specdec.model import native

pytestmark = [pytest.mark.skipif(not native.available(), reason=native.status()[1]),
              pytest.mark.usefixtures("one_thread")]

LAYERS = {"int8": native.NativeInt8Linear, "int4": native.NativeInt4Linear}
ISAS = [pytest.param(i, id=native.ISA_NAMES[i]) for i in (native.isas() if native.available() else [])]
N, EPS = 40, 1e-6  # N not a multiple of 16: the last block's channels are partly padding
# int8 pads K to a multiple of 4 and takes any K: 78 is a multiple of neither 32, 8 (a vector) nor 4;
# 40 is one group of 32 and a tail. int4's K is whole groups of 32.
SHAPES = [("int8", 64), ("int8", 78), ("int8", 40), ("int4", 64), ("int4", 96)]
PROLOGUES = [(False, False), (True, False), (False, True), (True, True)]  # (norm, gated)
ROWS = [1, 3, 7]  # 7: two row tiles on the AVX2 paths (4 rows each)


def _weights(k, seed):
    g = torch.Generator().manual_seed(seed)
    w, bias = torch.randn(N, k, generator=g) * 0.05, torch.randn(N, generator=g)
    return w, bias, torch.rand(k, generator=g) + 0.5                         # a norm weight far from 1


def _inputs(k, rows, gated, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, 2 * k if gated else k, generator=g)                 # (rows, K) or (rows, 2K): gate, up
    x[rows // 2] *= 40                                                       # a row on a much larger scale
    return x, torch.randn(rows, N, generator=g)                              # and a residual (rows, N)


def reference(w, bias, x, norm, gated, residual):
    """torch's ops in float64 on weights w (N, K): (the output, the matmul's input)."""
    h = x.double()
    if gated:
        gate, up = h.chunk(2, -1)
        h = F.silu(gate) * up
    if norm is not None:
        h = F.rms_norm(h, (h.shape[-1],), norm.double(), EPS)
    y = F.linear(h, w, None if bias is None else bias.double())              # (rows, N)
    return (y if residual is None else y + residual.double()), h


def bound(y, h, w):
    """Half an activation step times sum_k |w_nk|, with 1e-5 of the largest sum for float32 rounding."""
    amax = h.abs().amax(-1, keepdim=True)                                    # (rows, 1)
    return amax * (0.5 / 127 + 1e-5) * w.abs().sum(-1) + 1e-5 * (1 + y.abs())  # (rows, N)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("kind,k", SHAPES)
def test_every_prologue_and_epilogue_is_torchs_on_the_weights_the_layer_holds(kind, k, isa):
    w, bias, norm_weight = _weights(k, seed=k)
    for layer in (LAYERS[kind].from_weight(w, None, isa=isa), LAYERS[kind].from_weight(w, bias, isa=isa)):
        held = layer.dequantized().double()                                  # (N, K)
        for (with_norm, gated), with_residual, rows in itertools.product(PROLOGUES, (False, True), ROWS):
            x, residual = _inputs(k, rows, gated, seed=rows)
            norm, residual = norm_weight if with_norm else None, residual if with_residual else None
            got = layer.fused(x, norm=None if norm is None else (norm, EPS), gated=gated, residual=residual)
            want, h = reference(held, layer.bias, x, norm, gated, residual)
            err = (got.double() - want).abs()                                # (rows, N)
            assert (err <= bound(want, h, held)).all(), (layer, with_norm, gated, with_residual, rows)


@pytest.mark.parametrize("kind,k", SHAPES)
def test_every_path_gives_the_same_bits_with_every_prologue_and_epilogue(kind, k):
    """The scalar path's prologue takes the vector code's steps in its order: every path, the same bits."""
    w, bias, norm = _weights(k, seed=k)
    x, residual = _inputs(k, 7, True, seed=k)
    up = x[:, :k].contiguous()
    for with_norm, gated in PROLOGUES:
        outs = [LAYERS[kind].from_weight(w, bias, isa=isa).fused(
                    x if gated else up, norm=(norm, EPS) if with_norm else None, gated=gated, residual=residual)
                for isa in native.isas()]
        assert all(torch.equal(outs[0], o) for o in outs), (with_norm, gated)


def test_a_k_the_weights_do_not_hold_is_refused():
    w = torch.randn(N, 78)
    with pytest.raises(ValueError, match="int4 needs in_features divisible by 32"):
        native.NativeInt4Linear.from_weight(w, None)
    int8 = native.NativeInt8Linear.from_weight(w, None)                       # 78 inputs held as 80
    with pytest.raises(RuntimeError, match="x has 74 inputs, the weights 80 .inputs padded to a multiple of 4"):
        int8(torch.randn(2, 74))
    int4 = native.NativeInt4Linear.from_weight(w[:, :64], None)
    with pytest.raises(RuntimeError, match="x has 60 inputs, the weights 64"):
        int4(torch.randn(2, 60))
    with pytest.raises(RuntimeError, match="x has 0 inputs"):
        int4(torch.randn(2, 0))
