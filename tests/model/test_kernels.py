"""Each packed Linear against a dequantised reference, on tiny shapes; state round trips; and
the batch invariance the int8 verifier relies on (a row's result does not depend on its batch)."""
import pytest
import torch
import torch.nn.functional as F

from specdec.model.kernels import (
    GROUP,
    DenseLinear,
    Fp16Linear,
    Int4Linear,
    Int8DnnLinear,
    Int8Linear,
)
from specdec.model.precision import cpu_candidates, cpu_capabilities, cpu_variants

OUT, IN = 48, 64


def _weights(seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(OUT, IN, generator=g) * 0.1, torch.randn(OUT, generator=g), torch.randn(5, IN, generator=g)


def rel_err(a, b):
    return float((a - b).norm() / b.norm())


@pytest.mark.parametrize("transposed", [False, True])
def test_float32_is_f_linear(transposed):
    w, b, x = _weights()
    layer = DenseLinear.from_weight(w, b, transposed=transposed)
    torch.testing.assert_close(layer(x), F.linear(x, w, b), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(layer(x[None]), F.linear(x, w, b)[None], rtol=1e-5, atol=1e-5)  # any leading dims


needs_fbgemm = pytest.mark.skipif(not cpu_capabilities()["fbgemm"], reason="fbgemm (x86) kernels not in this torch")
FBGEMM_INT8 = any(v.kernel == "fbgemm" for v in cpu_variants())
needs_fbgemm_int8 = pytest.mark.skipif(not FBGEMM_INT8, reason="fbgemm's int8 (torch's deprecated quantized tensors) "
                                       "is offered only where specdec's kernels are not built")
needs_int4 = pytest.mark.skipif("int4" not in cpu_candidates(), reason="no AVX2/AVX512 int4 kernel here")


@needs_fbgemm_int8
@pytest.mark.parametrize("batch_invariant", [True, False])
def test_int8_matches_its_dequantised_weights(batch_invariant):
    w, b, x = _weights()
    layer = Int8Linear.from_weight(w, b, batch_invariant)
    st = layer.state()
    deq = st["qweight"].float() * st["scales"][:, None]                 # the weights it really holds
    assert (deq - w).abs().max() <= st["scales"].max() / 2 + 1e-7       # rounding to nearest step
    # 7-bit activations per row: a few percent of relative error, never more
    assert rel_err(layer(x), F.linear(x, deq, b)) < 0.03
    again = Int8Linear.from_state(st, b, batch_invariant)
    assert torch.equal(again(x), layer(x))


@needs_fbgemm_int8
def test_int8_rows_do_not_depend_on_the_batch():
    w, b, x = _weights()
    x[2] *= 50                                                          # one row with a much larger range
    layer = Int8Linear.from_weight(w, b, batch_invariant=True)
    together = layer(x)
    alone = torch.cat([layer(x[i:i + 1]) for i in range(len(x))])
    assert torch.equal(together, alone)
    plain = Int8Linear.from_weight(w, b, batch_invariant=False)         # fbgemm's one scale per batch
    assert not torch.equal(plain(x), torch.cat([plain(x[i:i + 1]) for i in range(len(x))]))


needs_onednn_int8 = pytest.mark.skipif(not cpu_capabilities()["onednn_int8"],
                                       reason="no VNNI/AMX here: oneDNN's int8 path is not offered")


@needs_onednn_int8
@pytest.mark.parametrize("with_bias", [True, False])
def test_onednn_int8_is_the_exact_integer_product_of_what_it_holds(with_bias):
    w, b, x = _weights()
    b = b if with_bias else None
    x[1] *= 40                                                          # rows on very different scales
    layer = Int8DnnLinear.from_weight(w, b)
    st = layer.state()
    assert st["qweight"].dtype == torch.int8 and st["qweight"].shape == (OUT, IN)
    deq = st["qweight"].float() * st["scales"][:, None]                 # the weights it really holds
    assert (deq - w).abs().max() <= st["scales"].max() / 2 + 1e-7
    # our own reference: each row quantised on its own scale, integer products summed exactly
    s = x.abs().amax(-1, keepdim=True) / 127
    xq = (x / s).round()
    exact = (xq.double() @ st["qweight"].double().T) * st["scales"].double() * s.double()
    exact = exact if b is None else exact + b.double()
    torch.testing.assert_close(layer(x).double(), exact, rtol=1e-6, atol=1e-6)
    assert rel_err(layer(x), F.linear(x, deq, b)) < 0.02               # 8-bit activations: about 1 %
    assert torch.equal(Int8DnnLinear.from_state(st, b)(x), layer(x))


@needs_onednn_int8
def test_onednn_int8_rows_do_not_depend_on_the_batch():
    w, b, x = _weights()
    x[2] *= 50
    layer = Int8DnnLinear.from_weight(w, b)
    wide = Int8DnnLinear.from_weight(torch.randn(256, 1536) * 0.02, None)  # a verifier's width: oneDNN blocks it
    for lay, xs in ((layer, x), (wide, torch.randn(7, 1536))):
        assert torch.equal(lay(xs), torch.cat([lay(xs[i:i + 1]) for i in range(len(xs))]))


@needs_fbgemm
def test_fp16_weights_match_half_rounded_reference():
    w, b, x = _weights()
    layer = Fp16Linear.from_weight(w, b)
    torch.testing.assert_close(layer(x), F.linear(x, w.half().float(), b), rtol=1e-4, atol=1e-4)
    assert torch.equal(Fp16Linear.from_state(layer.state(), b)(x), layer(x))


@needs_int4
def test_int4_matches_its_dequantised_weights():
    w, b, x = _weights()
    layer = Int4Linear.from_weight(w, b)
    g = w.reshape(OUT, IN // GROUP, GROUP)
    lo, hi = g.amin(-1, keepdim=True), g.amax(-1, keepdim=True)
    scale = (hi - lo) / 15
    deq = (((g - lo) / scale).round().clamp(0, 15) * scale + lo).reshape(OUT, IN)  # w = scale * q + min
    assert (deq - w).abs().max() <= scale.max() / 2 + 1e-6
    # bf16 activations and bf16 scales: within bf16 rounding of the exact product
    assert rel_err(layer(x), F.linear(x, deq, b)) < 0.02
    assert torch.equal(Int4Linear.from_state(layer.state(), b)(x), layer(x))


@needs_int4
def test_int4_refuses_rows_that_are_not_whole_groups():
    with pytest.raises(ValueError, match="divisible by 32"):
        Int4Linear.from_weight(torch.randn(8, 40), None)


def _every_layer(w, b):
    layers = [DenseLinear.from_weight(w, b), DenseLinear.from_weight(w, b, transposed=True)]
    if FBGEMM_INT8:
        layers += [Int8Linear.from_weight(w, b, True), Int8Linear.from_weight(w, b, False)]
    if cpu_capabilities()["fbgemm"]:
        layers.append(Fp16Linear.from_weight(w, b))
    if cpu_capabilities()["onednn_int8"]:
        layers.append(Int8DnnLinear.from_weight(w, b))
    if "int4" in cpu_candidates():
        layers.append(Int4Linear.from_weight(w, b))
    return layers


def test_a_clone_is_the_same_layer_in_fresh_memory():
    """Calibration times clones of a layer so that none is in cache: each must compute the same."""
    w, b, x = _weights()
    for layer in _every_layer(w, b):
        twin = layer.clone()
        assert type(twin) is type(layer) and twin.extra_repr() == layer.extra_repr()
        assert torch.equal(twin(x), layer(x)), layer.kind
        a, c = layer.state(), twin.state()
        assert all(a[k].data_ptr() != c[k].data_ptr() for k in a if a[k].layout == torch.strided)
        assert twin.nbytes() == layer.nbytes() > 0
