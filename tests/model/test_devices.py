"""The device-generic lean forward (issue 17): a GPU's way (static cache, padded verifier, RoPE
as real halves) checked on the CPU in float32, where it is the same code; and the ``gpu`` tier,
which runs the same checks on a CUDA or MPS device and is skipped, and says so, without one."""
from __future__ import annotations

import pytest
import torch
from helpers import tiny

from specdec.decode.engine import Generation
from specdec.decode.start import make_drafter
from specdec.model.graphs import Graphed
from specdec.model.lm import CachedLM
from specdec.model.precision import Precision, gpu_candidates
from specdec.options import ConfigError, DecodeConfig
from specdec.weights.loading import GPU_PAD_ROWS, lean_options

pytestmark = pytest.mark.usefixtures("one_thread")


def chain_logits(model, ids: list[int]) -> torch.Tensor:
    """Prefill, a 5-row step, a rollback of two and an 8-row step: every cache operation once."""
    lm = CachedLM(model, tiny.V)
    out = [lm.forward(ids[:20], keep=20), lm.forward(ids[20:25], keep=5)]
    lm.rollback(ids[:23])
    out.append(lm.forward(ids[22:30], keep=8))
    return torch.cat(out)


def test_the_static_path_and_real_rope_compute_the_dynamic_paths_logits():
    m = tiny.model(3, scale=4)
    ids = tiny.prompt_ids(30)
    reference = chain_logits(tiny.lean(m), ids)
    for options in ({"static": True}, {"static": True, "pad_rows": 8}, {"static": True, "complex_rope": False},
                    {"complex_rope": False}):
        torch.testing.assert_close(chain_logits(tiny.lean(m, **options), ids), reference, rtol=1e-5, atol=1e-5,
                                   msg=lambda s: f"{options}: {s}")


def test_a_static_cache_grows_keeping_its_entries_and_drops_its_graphs():
    m = tiny.model(3, scale=4)
    ids = (tiny.prompt_ids(40, seed=3) * 3)[:100]
    lean = tiny.lean(m, static=True)
    lm = CachedLM(lean, tiny.V)
    lm.cache = lean.new_cache(capacity=16)  # start tiny so that growth happens
    lm.cache.graphs[1] = "stale"
    out = torch.cat([lm.forward(ids[i:i + 10], keep=10) for i in range(0, 100, 10)])
    assert lm.cache.capacity >= 100 and not lm.cache.graphs
    torch.testing.assert_close(out, tiny.lean(m)(torch.tensor(ids), tiny.lean(m).new_cache(), 100)[:, : tiny.V],
                               rtol=1e-5, atol=1e-5)


def test_padding_makes_the_static_verifier_batch_invariant():
    """Unpadded, a 6-row forward may sum in another order than six 1-row forwards (seen here in
    float32: differences of ~3e-7); padded to one row count, each row's numbers are its own."""
    ids = tiny.prompt_ids(14)
    lean = tiny.lean(tiny.model(3, scale=4), static=True, pad_rows=8)
    assert torch.equal(*tiny.verification_and_single_rows(lean, ids))


def test_static_padded_speculative_greedy_is_exactly_verifier_greedy():
    target = tiny.model(4, scale=8)
    draft = tiny.noisy_copy(target, seed=5, noise=0.5)
    pair = tiny.pair(tiny.lean(target, static=True, pad_rows=8), tiny.lean(draft, static=True))
    cfg = DecodeConfig(max_new_tokens=40, k=5)
    accepted = 0
    for seed in range(3):
        prompt = tiny.prompt_ids(seed=seed)
        base = Generation(pair, prompt, cfg, make_drafter("none", pair)).run()
        spec = Generation(pair, prompt, cfg, make_drafter("model", pair)).run()
        assert spec.token_ids == base.token_ids
        accepted += spec.summary().accepted
    assert accepted > 0


def test_static_tree_nodes_get_their_paths_chain_logits():
    """A tree row attends through the mask to its ancestors at other slots than a chain's, so its
    sums may round differently (not bitwise, unlike the CPU's exact row-by-row tree attention)."""
    from specdec.decode.tree import verifier_attention
    m = tiny.model(3, scale=4)
    ctx, parents, tokens = tiny.prompt_ids(10), [-1, 0, 0, 1, 1, 2], [5, 7, 9, 11, 13, 15]
    lean = tiny.lean(m, static=True, pad_rows=8)
    lm = CachedLM(lean, tiny.V)
    lm.forward(ctx[:-1], keep=1)
    tokens[0] = ctx[-1]
    tree = lm.forward_tree(tokens, verifier_attention(parents, len(lm)))              # (6, V)
    for j, path in enumerate([[0], [0, 1], [0, 2], [0, 1, 3], [0, 1, 4], [0, 2, 5]]):
        chain = CachedLM(lean, tiny.V)
        chain.forward(ctx[:-1], keep=1)
        row = chain.forward([tokens[i] for i in path], keep=1)[0]
        torch.testing.assert_close(tree[j], row, rtol=1e-5, atol=1e-5)


def test_the_cpu_keeps_its_dynamic_exact_path_and_gpus_get_the_static_padded_one():
    assert lean_options(torch.device("cpu"), "target") == {}
    assert lean_options(torch.device("mps"), "target") == {"static": True, "pad_rows": GPU_PAD_ROWS, "graphs": False}
    assert lean_options(torch.device("mps"), "draft")["pad_rows"] == 0
    with pytest.raises(RuntimeError, match="CUDA"):
        Graphed(lambda x: x, (torch.zeros(1),))


def test_gpu_precision_names_are_checked_against_the_devices_kernels():
    from specdec.model.precision import _gpu
    mps = torch.device("mps")
    assert gpu_candidates(mps)[:3] == ["float32", "bfloat16", "float16"]
    assert _gpu(mps, "auto", "precision").name == "float16"
    assert "requested" in _gpu(mps, "bfloat16", "precision").reason
    with pytest.raises(ConfigError, match="int4"):
        _gpu(mps, "int4", "precision")


def test_int8_weight_only_matches_its_dequantised_weights():
    from specdec.model.kernels import (
        Int8WeightOnlyLinear,
        quantize_rows,
        weight_only_int8_on,
    )
    if not weight_only_int8_on(torch.device("cpu")):
        pytest.skip("this torch build has no _weight_int8pack_mm for the CPU")
    w, x = torch.randn(96, 64) * 0.05, torch.randn(3, 64)
    layer = Int8WeightOnlyLinear.from_weight(w, torch.ones(96))
    q, s = quantize_rows(w)
    reference = x.bfloat16().float() @ (q.float() * s[:, None]).T + 1
    torch.testing.assert_close(layer(x), reference, rtol=2e-2, atol=2e-2)
    on_cpu = Precision("int8", "").layers(torch.device("cpu")).build(w, None)
    assert on_cpu.kind.startswith("int8 (W8A8")  # the CPU keeps its own batch-invariant W8A8


# ---- the gpu tier: the same checks where they matter -------------------------------------------

def _device_pair(device, precision, graphs):
    target = tiny.model(4, scale=8)
    draft = tiny.noisy_copy(target, seed=5, noise=0.5)
    opts = lambda role: {**lean_options(device, role), "graphs": graphs and device.type == "cuda"}  # noqa: E731
    pair = tiny.pair(tiny.lean(target, precision, device=str(device), **opts("target")),
                     tiny.lean(draft, precision, device=str(device), **opts("draft")))
    pair.device = device
    return pair


@pytest.mark.gpu
@pytest.mark.parametrize("graphs", [False, True])
def test_gpu_speculative_greedy_is_exactly_verifier_greedy(gpu_device, graphs):
    if graphs and gpu_device.type != "cuda":
        pytest.skip("CUDA graphs are CUDA-only")
    precision = "bfloat16" if gpu_device.type == "cuda" else "float16"
    pair = _device_pair(gpu_device, precision, graphs)
    cfg = DecodeConfig(max_new_tokens=40, k=5)
    for seed in range(3):
        prompt = tiny.prompt_ids(seed=seed)
        base = Generation(pair, prompt, cfg, make_drafter("none", pair)).run()
        spec = Generation(pair, prompt, cfg, make_drafter("model", pair)).run()
        assert spec.token_ids == base.token_ids


@pytest.mark.gpu
def test_cuda_graphs_replay_the_eager_forward(gpu_device):
    if gpu_device.type != "cuda":
        pytest.skip("CUDA graphs are CUDA-only")
    m, ids = tiny.model(3, scale=4), tiny.prompt_ids(30)
    eager = chain_logits(tiny.lean(m, "bfloat16", device="cuda", static=True, pad_rows=8), ids)
    graphed = chain_logits(tiny.lean(m, "bfloat16", device="cuda", static=True, pad_rows=8, graphs=True), ids)
    assert torch.equal(eager, graphed)


@pytest.mark.gpu
def test_the_device_forward_matches_the_cpu_in_float32(gpu_device):
    m, ids = tiny.model(3, scale=4), tiny.prompt_ids(30)
    on_device = chain_logits(tiny.lean(m, device=str(gpu_device), **lean_options(gpu_device, "target")), ids)
    torch.testing.assert_close(on_device.cpu(), chain_logits(tiny.lean(m), ids), rtol=1e-4, atol=1e-4)
