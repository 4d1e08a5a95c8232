"""The lean Qwen2 forward against transformers' on tiny random models; its cache rollback; and
exact greedy equality through the engine in int8, thanks to batch invariance."""
import pytest
import torch
from helpers import tiny

from specdec import DecodeConfig, Generation, make_drafter
from specdec.model.lm import CachedLM
from specdec.model.precision import cpu_candidates
from specdec.model.qwen2 import supports


def hf_logits(model, ids):
    with torch.inference_mode():
        return model(torch.tensor([ids])).logits[0]


# hidden 32 (head size 8): torch's attention; 256 (head size 64): specdec's attention op where it has a vector loop
HIDDEN = [32, 256]


@pytest.mark.parametrize("hidden", HIDDEN)
@pytest.mark.parametrize("transposed", [False, True])
def test_float32_lean_forward_equals_transformers(transposed, hidden):
    hf = tiny.model(0, scale=4, hidden=hidden)
    lean = tiny.lean(hf, transposed=transposed)
    ids = tiny.prompt_ids(20)
    lm = CachedLM(lean, hf.config.vocab_size)
    got = torch.cat([lm.forward(ids[:12], keep=12), lm.forward(ids[12:13], keep=1), lm.forward(ids[13:], keep=7)])
    torch.testing.assert_close(got, hf_logits(hf, ids), rtol=1e-4, atol=1e-4)
    assert lean.num_parameters() == sum(p.numel() for p in hf.parameters())


def test_the_fused_masked_attention_of_long_chunks_equals_transformers():
    """Chunks longer than EXACT_ROWS (every real prompt's prefill) take the fused masked
    attention, not the row-by-row path: its causal mask, offset by the cached length, must give
    transformers' logits for a chunk on an empty cache and for one after a cache."""
    from specdec.model.qwen2 import EXACT_ROWS
    hf = tiny.model(0, scale=4)
    lean = tiny.lean(hf)
    ids = (tiny.prompt_ids(40, seed=7) * 3)[:EXACT_ROWS + 40 + EXACT_ROWS + 7]
    first, second = EXACT_ROWS + 40, EXACT_ROWS + 7           # both above EXACT_ROWS: the fused path
    lm = CachedLM(lean, hf.config.vocab_size)
    got = torch.cat([lm.forward(ids[:first], keep=first), lm.forward(ids[first:], keep=second)])
    torch.testing.assert_close(got, hf_logits(hf, ids), rtol=1e-4, atol=1e-4)


def test_rollback_then_forward_equals_a_fresh_forward():
    lean = tiny.lean(tiny.model(1))
    ids = tiny.prompt_ids(16)
    lm = CachedLM(lean, tiny.V)
    lm.forward(ids, keep=1)
    lm.rollback(ids[:9])                    # invariant: all committed tokens but the last
    assert len(lm) == 8
    again = lm.forward(ids[8:12], keep=4)
    fresh = CachedLM(lean, tiny.V)
    torch.testing.assert_close(again, fresh.forward(ids[:12], keep=4), rtol=1e-5, atol=1e-5)


def test_cache_grows_past_its_first_capacity():
    hf = tiny.model(2)
    lean = tiny.lean(hf)
    lm = CachedLM(lean, tiny.V)
    lm.cache.reserve(0)
    ids = (tiny.prompt_ids(40, seed=3) * 20)[:200]
    lm.cache.k = [t[:, :16].clone() for t in lm.cache.k]  # start tiny so that growth happens
    lm.cache.v = [t[:, :16].clone() for t in lm.cache.v]
    out = torch.cat([lm.forward(ids[i:i + 10], keep=10) for i in range(0, 200, 10)])
    torch.testing.assert_close(out, hf_logits(hf, ids)[:, : tiny.V], rtol=1e-4, atol=1e-4)


@pytest.mark.skipif("int8" not in cpu_candidates(), reason="fbgemm (x86) kernels not in this torch")
@pytest.mark.parametrize("hidden", HIDDEN)
def test_int8_verifier_rows_equal_one_token_forwards(hidden):
    lean = tiny.lean(tiny.model(3, scale=4, hidden=hidden), "int8")
    ids = tiny.prompt_ids(14)
    assert torch.equal(*tiny.verification_and_single_rows(lean, ids))


@pytest.mark.skipif("int8" not in cpu_candidates(), reason="fbgemm (x86) kernels not in this torch")
@pytest.mark.parametrize("confidence", [0.0, 0.6])
def test_int8_speculative_greedy_is_exactly_verifier_greedy(confidence):
    target = tiny.model(4, scale=8)
    draft = tiny.noisy_copy(target, seed=5, noise=0.5)
    pair = tiny.pair(tiny.lean(target, "int8"), tiny.lean(draft, "int8", batch_invariant=False))
    cfg = DecodeConfig(max_new_tokens=40, k=5, confidence=confidence)
    for seed in range(3):
        prompt = tiny.prompt_ids(seed=seed)
        spec = Generation(pair, prompt, cfg, make_drafter("model", pair)).run()
        base = Generation(pair, prompt, cfg, make_drafter("none", pair)).run()
        assert spec.token_ids == base.token_ids
        assert 0 < spec.summary().accepted < spec.summary().drafted


def test_only_plain_qwen2_configs_take_the_lean_forward():
    cfg = tiny.model(0).config
    assert supports(cfg)
    cfg.use_sliding_window = True
    assert not supports(cfg)
