"""Each packed Linear against a dequantised reference, on tiny shapes; state round trips; and
the batch invariance the int8 verifier relies on (a row's result does not depend on its batch)."""
import pytest
import torch
import torch.nn.functional as F

from specdec.kernels import GROUP, DenseLinear, Fp16Linear, Int4Linear, Int8Linear
from specdec.precision import cpu_candidates

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


needs_fbgemm = pytest.mark.skipif("int8" not in cpu_candidates(), reason="fbgemm (x86) kernels not in this torch")
needs_int4 = pytest.mark.skipif("int4" not in cpu_candidates(), reason="no AVX2/AVX512 int4 kernel here")


@needs_fbgemm
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


@needs_fbgemm
def test_int8_rows_do_not_depend_on_the_batch():
    w, b, x = _weights()
    x[2] *= 50                                                          # one row with a much larger range
    layer = Int8Linear.from_weight(w, b, batch_invariant=True)
    together = layer(x)
    alone = torch.cat([layer(x[i:i + 1]) for i in range(len(x))])
    assert torch.equal(together, alone)
    plain = Int8Linear.from_weight(w, b, batch_invariant=False)         # fbgemm's one scale per batch
    assert not torch.equal(plain(x), torch.cat([plain(x[i:i + 1]) for i in range(len(x))]))


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
