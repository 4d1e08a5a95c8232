"""Engine mechanics on tiny models: cache rollback, seeds, stops, trace consistency."""
import json

import torch
from helpers import tiny

from specdec import DecodeConfig, Generation, RoundTrace, SamplingConfig, make_drafter
from specdec.model.lm import CachedLM


def test_rollback_equals_a_fresh_forward():
    model = tiny.model(0)
    ids = tiny.prompt_ids(12)
    lm = CachedLM(model, tiny.V)
    lm.forward(ids[:11], keep=1)                  # cache holds 11 tokens
    lm.rollback(ids[:7])                          # committed 7 -> keep all but the last: 6
    assert len(lm) == 6
    rolled = lm.forward(ids[6:9], keep=3)         # (3, V)
    with torch.inference_mode():
        fresh = model(torch.tensor([ids[:9]])).logits[0, -3:, :tiny.V]
    assert torch.allclose(rolled, fresh, atol=1e-5)


def _sampled(seed: int, drafter="model"):
    target = tiny.model(1, scale=4)
    pair = tiny.pair(target, tiny.noisy_copy(target, 2, 0.5))
    pair.stop_ids = frozenset()  # EOS is an ordinary token here: every run has exactly 24 tokens
    cfg = DecodeConfig(max_new_tokens=24, k=3, seed=seed, sampling=SamplingConfig(1.0, top_k=30, top_p=0.9))
    return Generation(pair, tiny.prompt_ids(), cfg, make_drafter(drafter, pair)).run()


def _without_times(gen):
    return [{k: v for k, v in r.to_dict().items() if k not in ("times", "elapsed")} for r in gen.rounds]


def test_same_seed_same_trace_different_seed_different_trace():
    a, b, c = _sampled(5), _sampled(5), _sampled(6)
    assert a.token_ids == b.token_ids and _without_times(a) == _without_times(b)
    assert _without_times(a) != _without_times(c)


def test_trace_is_consistent_and_round_trips_through_json():
    gen = _sampled(0)
    assert "".join(p for r in gen.rounds for p in r.pieces) == gen.text == gen.pair.decode(gen.token_ids)
    for r in gen.rounds:
        n_after = r.context_len + len(r.emitted)
        assert r.target_cache[1] == n_after - 1                    # the invariant: all committed but the last
        assert r.draft_cache[1] <= n_after - 1
        assert r.target_cache[0] == r.context_len + r.drafted      # the verifier saw K + 1 new positions
        assert list(r.emitted[:r.n_accepted]) == [p.token_id for p in r.positions[:r.n_accepted]]
        for p in r.positions:
            assert abs(p.ratio - p.p / p.q) < 1e-5 and 0 < p.u <= 1 and 0 <= p.beta <= 1 + 1e-6
            assert (p.status == "accepted") == (r.positions.index(p) < r.n_accepted)
    s = gen.summary()
    assert s.new_tokens == len(gen.token_ids) == 24 and gen.stop_reason == "max_new_tokens"
    assert s.drafted == sum(r.drafted for r in gen.rounds) and s.accepted == sum(r.n_accepted for r in gen.rounds)
    assert sum(s.accepted_histogram) == s.rounds and s.target_forwards == s.rounds + 1
    back = [RoundTrace.from_dict(json.loads(json.dumps(r.to_dict()))) for r in gen.rounds]
    assert back == gen.rounds


def test_stops_at_eos_max_new_tokens_and_the_context_limit():
    target = tiny.model(4, scale=8)
    pair = tiny.pair(target, tiny.noisy_copy(target, 1, 0.3))
    prompt = tiny.prompt_ids()
    pair.stop_ids = frozenset()
    free = Generation(pair, prompt, DecodeConfig(max_new_tokens=20, k=4), make_drafter("model", pair)).run()
    stop = free.token_ids[6]  # declare the 7th token a stop token: the run must end right there
    pair.stop_ids = frozenset({stop})
    gen = Generation(pair, prompt, DecodeConfig(max_new_tokens=20, k=4), make_drafter("model", pair)).run()
    first = free.token_ids.index(stop)
    assert gen.token_ids == free.token_ids[:first + 1] and gen.stop_reason == "eos"

    plain = tiny.pair(tiny.model(5), tiny.model(6))
    plain.stop_ids = frozenset()
    gen = Generation(plain, tiny.prompt_ids(), DecodeConfig(max_new_tokens=13, k=5),
                     make_drafter("model", plain)).run()
    assert len(gen.token_ids) == 13 and gen.stop_reason == "max_new_tokens"

    long_prompt = tiny.prompt_ids(250)  # the tiny models hold 256 positions
    gen = Generation(plain, long_prompt, DecodeConfig(max_new_tokens=50, k=4),
                     make_drafter("model", plain)).run()
    assert gen.stop_reason == "context" and len(long_prompt) + len(gen.token_ids) == 256


def test_lookup_drafter_copies_the_latest_earlier_match_with_an_exactly_one_hot_q():
    from specdec import LookupDrafter
    d = LookupDrafter(vocab_size=10)
    for sampling in (SamplingConfig(), SamplingConfig(0.7, top_k=3)):  # q must be one-hot at any temperature
        prop = d.propose([1, 2, 3, 4, 9, 2, 3, 5, 6, 2, 3], 3, sampling, torch.Generator())
        assert prop.drafted == [5, 6, 2]           # "2 3" last seen before "5 6 2"
        assert torch.equal(prop.probs[:-1], torch.eye(10)[[5, 6, 2]])  # anything else is lossy at T > 0
    assert d.propose([1, 2, 3], 3, SamplingConfig(), torch.Generator()).drafted == []


def test_cancel_stops_a_long_prefill_between_chunks(monkeypatch):
    import specdec.model.lm
    monkeypatch.setattr(specdec.model.lm, "PREFILL_CHUNK", 16)
    target = tiny.model(1)
    pair = tiny.pair(target, None)
    gen = Generation(pair, tiny.prompt_ids(200), DecodeConfig(max_new_tokens=8), make_drafter("none", pair))
    calls = []

    def cancel_after_two(module, args, kwargs, out):
        calls.append(1)
        if len(calls) == 2:
            gen.cancel()
    handle = target.register_forward_hook(cancel_after_two, with_kwargs=True)
    try:
        assert list(gen) == []
    finally:
        handle.remove()
    assert gen.stop_reason == "cancelled" and len(calls) == 2 and gen.token_ids == []
    full = Generation(pair, tiny.prompt_ids(200), DecodeConfig(max_new_tokens=4), make_drafter("none", pair))
    assert len(full.run().token_ids) == 4  # chunked prefill, same cache: the run itself is unchanged
