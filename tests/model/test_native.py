"""specdec's own int8/int4 kernels (specdec/model/csrc/qlinear.cpp): against their dequantised
reference, bitwise batch-invariant at 1..16 rows, the same bits on every instruction-set path this
CPU runs, loaded from a mapped file exactly as packed, and the fallback where they are not built;
its attention op against torch's; a whole decoder layer in one call bitwise the op-by-op layer. (The
fused prologues and epilogues: test_fused_kernels.py.) The prefetch setting round-trips, and the
results are the same bits whatever it is."""
import shutil
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from specdec.model import native
from specdec.model.precision import Precision, cpu_capabilities, cpu_variants
from specdec.weights import packed

pytestmark = pytest.mark.skipif(not native.available(), reason=native.status()[1])


def test_the_kernels_are_built_wherever_a_compiler_is():
    """`make test` builds them (pip install --no-build-isolation -e .): a broken build must not pass as a skip."""
    if shutil.which("c++") or shutil.which("g++"):
        assert native.available(), native.status()[1]


def _case(n=40, k=96, rows=19, seed=0):
    g = torch.Generator().manual_seed(seed)
    w, b, x = torch.randn(n, k, generator=g) * 0.05, torch.randn(n, generator=g), torch.randn(rows, k, generator=g)
    x[3] *= 40                                                  # one row with a much larger range
    return w, b, x


def reference(layer, x, b):
    """What the kernel computes, in float64: the layer's own weights times x quantised per row to
    int8 with the kernel's rounding (half to even of x * 127 / max|x|)."""
    amax = x.abs().amax(1, keepdim=True)
    xq = (x * (torch.full_like(amax, 127) / amax)).round().clamp(-127, 127)  # half to even, as the kernel
    return (xq.double() @ layer.dequantized().double().T) * (amax.double() / 127) + b.double()


LAYERS = {"int8": native.NativeInt8Linear, "int4": native.NativeInt4Linear}


@pytest.mark.parametrize("kind", LAYERS)
@pytest.mark.parametrize("shape", [(40, 96), (48, 64), (2048, 1536)])  # N and K not multiples of 16 and 32 too
def test_every_path_equals_the_dequantised_reference_and_every_other_path(kind, shape):
    if kind == "int4" and shape[1] % native.GROUP:
        pytest.skip("int4 needs K divisible by 32")
    w, b, x = _case(*shape)
    outs = {}
    for isa in native.isas():
        layer = LAYERS[kind].from_weight(w, b, isa=isa)
        outs[isa] = layer(x)
        torch.testing.assert_close(outs[isa].double(), reference(layer, x, b), rtol=1e-5, atol=1e-5)
    first = outs[native.isas()[0]]
    assert all(torch.equal(first, o) for o in outs.values()), "the instruction-set paths disagree"


@pytest.mark.parametrize("kind", LAYERS)
def test_weights_stay_within_half_a_step_of_the_originals(kind):
    w, b, x = _case(256, 1536)
    layer = LAYERS[kind].from_weight(w, b)
    err = (layer.dequantized() - w).abs()
    if kind == "int8":
        assert (err <= layer.scales[:256, None] / 2 + 1e-7).all()
    else:
        _, d, _ = native.unpack_int4(layer.packed, 256)
        # the step is d; float16 d and m cost a little more than half a step at most
        assert (err.reshape(256, -1, 32) <= d.float()[..., None] * 0.5 + 2e-3 * w.abs().max()).all()
    assert float((layer(x) - F.linear(x, w, b)).norm() / F.linear(x, w, b).norm()) < (0.02 if kind == "int8" else 0.12)


@pytest.mark.parametrize("kind", LAYERS)
def test_a_rows_result_does_not_depend_on_the_rows_beside_it(kind):
    """Bitwise, at every batch size 1..16 and on every path: what lets a verification over K+1
    rows give exactly the numbers of K+1 one-row forwards."""
    w, b, x = _case(64, 1536, rows=16)
    for isa in native.isas():
        layer = LAYERS[kind].from_weight(w, b, isa=isa)
        alone = torch.cat([layer(x[i:i + 1]) for i in range(16)])
        for rows in range(1, 17):
            assert torch.equal(layer(x[:rows]), alone[:rows]), (isa, rows)


@pytest.mark.parametrize("kind", LAYERS)
def test_state_round_trips_and_a_mapped_file_runs_as_packed(kind, tmp_path):
    w, b, x = _case(40, 96 if kind == "int8" else 64)
    layer = LAYERS[kind].from_weight(w, b)
    path = tmp_path / "layer.safetensors"
    packed.write(path, [("odd", torch.ones(3, dtype=torch.bfloat16)), *layer.state().items()])  # unaligned before
    reader = packed.Reader(path, mapped=True)
    state = {k: reader[k] for k in layer.state()}
    for k, t in layer.state().items():
        assert torch.equal(state[k], t) and state[k].data_ptr() % packed.ALIGN == 0
    del reader
    again = LAYERS[kind].from_state(state, b)
    assert all(again.state()[k].data_ptr() == state[k].data_ptr() for k in state if k != "shape")  # the file's pages
    assert torch.equal(again(x), layer(x))
    assert torch.equal(LAYERS[kind].from_state(layer.state(), b)(x), layer(x))


@pytest.fixture
def prefetch_restored():
    yield
    native.set_prefetch(native.DEFAULT_PREFETCH)


SETTINGS = [*native.PREFETCH_CANDIDATES, native.Prefetch(512, native.Hint.T1),
            native.Prefetch(native.MAX_PREFETCH, native.Hint.NTA), native.DEFAULT_PREFETCH]


def test_the_prefetch_setting_round_trips_and_a_bad_one_is_refused(prefetch_restored):
    for setting in SETTINGS:
        native.set_prefetch(setting)
        assert native.prefetch() == setting and native.Prefetch.from_label(setting.label) == setting
    with pytest.raises(RuntimeError, match="outside 0"):
        native.ops().set_prefetch(native.MAX_PREFETCH + 1, 0)
    with pytest.raises(RuntimeError, match="is none of"):
        native.ops().set_prefetch(64, 3)
    assert native.prefetch() == SETTINGS[-1]                                # a refused setting changes nothing
    with pytest.raises(ValueError, match="Prefetch.distance must be"):
        native.Prefetch(-64)
    with pytest.raises(ValueError, match="Prefetch.hint must be one of T0, T1, NTA"):
        native.Prefetch(64, 3)


def test_a_fresh_library_starts_at_the_default():
    """What a caller of the ops gets before anything sets it (qlinear.cpp's initial value)."""
    code = "from specdec.model import native; print(native.prefetch().label)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == native.DEFAULT_PREFETCH.label


@pytest.mark.parametrize("kind", LAYERS)
def test_the_results_are_the_same_bits_whatever_the_prefetch(kind, prefetch_restored):
    """On every path at 1, 5 and 19 rows (whole row tiles and a remainder on each), and a model whose
    layers each run in one call (decoder_layer): weights long enough that every distance prefetches,
    and stops before their end."""
    from helpers import tiny

    from specdec.model.lm import CachedLM
    w, b, x = _case(160, 1536, rows=19)
    layers = [LAYERS[kind].from_weight(w, b, isa=isa) for isa in native.isas()]
    lean = tiny.lean(tiny.model(5, scale=4, hidden=256), kind)
    assert lean.one_call
    outs = {}
    for setting in SETTINGS:
        native.set_prefetch(setting)
        lm = CachedLM(lean, tiny.V)
        outs[setting] = ([layer(x[:rows]) for layer in layers for rows in (1, 5, 19)]
                         + [lm.forward(tiny.prompt_ids(12), keep=1), lm.forward(tiny.prompt_ids(5, seed=1), keep=5)])
    for setting, got in outs.items():
        assert all(map(torch.equal, got, outs[native.DEFAULT_PREFETCH])), setting


def test_packing_round_trips():
    q = torch.randint(-127, 128, (40, 96), dtype=torch.int8)
    assert torch.equal(native.unpack_int8(native.pack_int8(q), 40, 96), q)
    q4, d, m = native.quantize_int4(torch.randn(40, 64))
    back = native.unpack_int4(native.pack_int4(q4, d, m), 40)
    assert all(torch.equal(a, b) for a, b in zip(back, (q4, d, m)))


@pytest.mark.parametrize("kind", LAYERS)
def test_non_finite_rows_give_nan_and_a_zero_row_gives_the_bias(kind):
    w, b, x = _case(32, 64, rows=4)
    x[1, 5], x[2] = float("nan"), 0.0
    x[3, 0] = float("inf")
    y = LAYERS[kind].from_weight(w, b)(x)
    assert y[0].isfinite().all() and y[1].isnan().all() and y[3].isnan().all()
    assert torch.equal(y[2], b)


@pytest.mark.parametrize("D", [8, 64, 128])  # 8: the scalar loop; 64 and 128 the vector one where there is one
def test_attention_is_torchs_over_each_rows_own_keys_and_a_row_alone_gives_its_bits(D):
    g = torch.Generator().manual_seed(D)
    T, H, G, C = 5, 4, 2, 30
    q = torch.randn(T, H, D, generator=g)
    k, v = torch.randn(G, C, D, generator=g), torch.randn(G, C, D, generator=g)
    lengths = torch.tensor([1, 9, 17, 26, 30])                                # a chain's rows: the first keys
    index = torch.stack([torch.randperm(C, generator=g) for _ in range(T)])  # a tree's rows: their own keys
    for idx in (None, index):
        out = native.ops().attention(q, k, v, lengths, idx)                   # (T, H*D)
        for t in range(T):
            keys = torch.arange(lengths[t]) if idx is None else idx[t, :lengths[t]]
            want = F.scaled_dot_product_attention(q[t, :, None], k[:, keys], v[:, keys], enable_gqa=True)  # (H, 1, D)
            torch.testing.assert_close(out[t], want.reshape(H * D), rtol=1e-5, atol=1e-5)
            alone = native.ops().attention(q[t:t + 1], k, v, lengths[t:t + 1], None if idx is None else idx[t:t + 1])
            assert torch.equal(alone[0], out[t])
    assert native.vector_attention(D) == (native.best_isa() >= 2 and D in (64, 128))


def test_without_the_library_the_choice_falls_back_to_torchs_kernels():
    with native.disabled():  # as where the library is not built; tests/model/test_fallback.py runs what follows
        caps = cpu_capabilities()
        assert caps["specdec"] is False and all(v.kernel != "specdec" for v in cpu_variants(caps))
        assert Precision("int8", "").cpu_kernel == "fbgemm" and Precision("int4", "").cpu_kernel == "torch"
        assert Precision("int8", "").cache_key(torch.device("cpu")) == "int8"


@pytest.mark.parametrize("kind", ["int8", "int4"])
@pytest.mark.parametrize("threads", [1, 2])
def test_a_layer_in_one_call_is_bitwise_the_layer_op_by_op(kind, threads):
    """The ``decoder_layer`` op (norm, q/k/v, RoPE, the cache write, attention, o, the MLP and both
    residuals in one C++ call) against the same layer as a dozen torch ops and kernel calls: the very
    bits, for a prompt, a verification chain and a token tree, and the cache it leaves behind."""
    from helpers import tiny

    from specdec.decode.tree import verifier_attention
    from specdec.model.lm import CachedLM
    lean = tiny.lean(tiny.model(5, scale=4, hidden=256), kind)                 # head size 64: the vector attention
    assert lean.one_call, "every linear here is specdec's: the layers run as one call"
    parents = [-1, 0, 0, 1, 1, 2, 4]
    torch.set_num_threads(threads)
    try:
        runs = []
        for one_call in (True, False):
            lean.one_call_layers = one_call
            lm = CachedLM(lean, tiny.V)
            ids = tiny.prompt_ids(20)
            out = [lm.forward(ids[:12], keep=1), lm.forward(ids[12:], keep=8)]      # a prompt, then a chain
            out.append(lm.forward_tree(ids[:7], verifier_attention(parents, len(lm))))
            n = len(lm)
            runs.append((torch.cat(out), lm.cache.k[1][:, :n].clone(), lm.cache.v[1][:, :n].clone()))
    finally:
        torch.set_num_threads(2)
    for got, want in zip(*runs):
        assert torch.equal(got, want)


def test_a_layer_in_one_call_refuses_a_cache_too_small():
    from helpers import tiny
    lean = tiny.lean(tiny.model(5, hidden=256), "int8")
    cache, layer, s = lean.new_cache(capacity=4), lean.layers[0], lean.shape
    isa, outs, *weights = layer.one_call()
    rot = torch.zeros(3, s.head_dim // 2, 2)
    with pytest.raises(RuntimeError, match="beyond the cache"):
        native.ops().decoder_layer(torch.zeros(3, s.hidden), rot, cache.k[0], cache.v[0], 2, torch.tensor([3, 4, 5]),
                                   None, layer.attn_norm, layer.mlp_norm, s.eps, s.heads, isa, outs, *weights)
