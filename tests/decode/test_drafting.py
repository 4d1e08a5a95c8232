"""The drafters and the knobs the app lets a learner turn, on tiny random models: draft noise
(lossless, q reported exactly), the adaptive stop rule in both directions, the T = 0 fast path,
prompt lookup that never reads the chat template, and the hybrid drafter. The numbers a run
reports about them are defined in tests/teach/test_theory.py."""
from __future__ import annotations

import pytest
import torch
from helpers import tiny
from helpers.scripted import hf_greedy

from specdec import (
    DecodeConfig,
    Generation,
    LookupDrafter,
    SamplingConfig,
    make_drafter,
)
from specdec.decode.drafters import ModelDrafter, mix_uniform, top_probability
from specdec.decode.sampling import probs_from_logits
from specdec.model.devices import Clock
from specdec.trace import DraftedBy, DraftStop


def _drafter(pair, stop_ids=frozenset(), context=None, fast_greedy=True):
    d = ModelDrafter(pair.draft, pair.vocab_size, Clock(pair.device), stop_ids, fast_greedy)
    d.prefill(context or tiny.prompt_ids())  # the cache holds every context token but the last
    return d


# ---- draft noise ------------------------------------------------------------------------------

@pytest.mark.parametrize("temperature", [1.0, 0.0])
def test_a_noisy_draft_reports_exactly_the_mixture_it_samples_from(pair, temperature):
    sampling, e = SamplingConfig(temperature), 0.3
    ctx = tiny.prompt_ids()
    clean = _drafter(pair).propose(ctx, 1, sampling, torch.Generator().manual_seed(0))
    noisy = _drafter(pair).propose(ctx, 1, sampling, torch.Generator().manual_seed(0), noise=e)
    assert torch.allclose(noisy.probs[:-1], (1 - e) * clean.probs[:-1] + e / pair.vocab_size)  # q' = (1 - e) q + e / V
    # and the first token is a sample of exactly that q': 4,000 draws from a fresh context each time
    n, g = 4000, torch.Generator().manual_seed(1)
    d = _drafter(pair)
    counts = torch.zeros(pair.vocab_size)
    for _ in range(n):
        d.rollback(ctx)
        counts[d.propose(ctx, 1, sampling, g, noise=e).drafted[0]] += 1
    tv = 0.5 * (counts / n - noisy.probs[0]).abs().sum()
    assert tv < 0.5 * (pair.vocab_size / n) ** 0.5 + 0.02, f"total variation {tv:.3f}"
    if temperature == 0:  # at T = 0 a noisy draft samples: not always q's argmax
        assert (counts > 0).sum() > 1


@pytest.mark.parametrize("noise", [0.0, 0.2, 0.7, 1.0])
def test_greedy_output_is_the_verifiers_at_every_noise_level(pair, noise):
    prompt = tiny.prompt_ids(seed=4)
    cfg = DecodeConfig(max_new_tokens=20, k=4, confidence=0.0, draft_noise=noise, sampling=SamplingConfig(0.0))
    gen = Generation(pair, prompt, cfg, make_drafter("model", pair)).run()
    base = Generation(pair, prompt, DecodeConfig(max_new_tokens=20, sampling=SamplingConfig(0.0)),
                      make_drafter("none", pair)).run()
    assert gen.token_ids == base.token_ids == hf_greedy(pair.target, prompt, n=20)
    if noise == 1.0:  # a uniform draft over a 256-token vocabulary is almost never right
        assert gen.summary().acceptance_rate < 0.2


def test_noise_lowers_acceptance():
    target = tiny.model(3, scale=8)
    close = tiny.pair(target, tiny.noisy_copy(target, 1, 0.05))  # a draft that agrees with the verifier often
    prompt = tiny.prompt_ids(seed=5)
    rates = []
    for e in (0.0, 0.5, 1.0):
        cfg = DecodeConfig(max_new_tokens=60, k=4, confidence=0.0, seed=3, draft_noise=e, ignore_eos=True)
        rates.append(Generation(close, prompt, cfg, make_drafter("model", close)).run().summary().acceptance_rate)
    assert rates[0] > 0.5 and rates[0] > rates[1] > rates[2]


# ---- adaptive drafting: when to stop ----------------------------------------------------------

def test_the_confidence_rule_stops_at_the_first_unsure_token_and_never_before(pair):
    ctx, sampling, k = tiny.prompt_ids(), SamplingConfig(1.0), 8
    free = _drafter(pair).propose(ctx, k, sampling, torch.Generator().manual_seed(2))
    assert free.stopped == DraftStop.LIMIT and len(free.drafted) == k and len(free.confidence) == k
    conf = free.confidence
    # each confidence is the draft's untempered top probability at that step
    first = top_probability(pair.draft(torch.tensor([ctx])).logits[0, -1, :pair.vocab_size])
    assert conf[0] == pytest.approx(first, rel=1e-4)
    # a threshold between the confidences: drafting ends right after the first one below it
    threshold = sorted(conf)[len(conf) // 2] + 1e-9
    cut = next(i for i, c in enumerate(conf) if c < threshold)
    stopped = _drafter(pair).propose(ctx, k, sampling, torch.Generator().manual_seed(2), confidence=threshold)
    assert stopped.drafted == free.drafted[:cut + 1] and stopped.stopped == DraftStop.CONFIDENCE
    assert all(c >= threshold for c in stopped.confidence[:-1]) and stopped.confidence[-1] < threshold
    # a threshold below every confidence never stops it; one above every one stops after one token
    low = _drafter(pair).propose(ctx, k, sampling, torch.Generator().manual_seed(2), confidence=min(conf) / 2)
    assert low.drafted == free.drafted and low.stopped == DraftStop.LIMIT
    high = _drafter(pair).propose(ctx, k, sampling, torch.Generator().manual_seed(2), confidence=0.9999)
    assert high.drafted == free.drafted[:1] and high.stopped == DraftStop.CONFIDENCE


def test_the_draft_stops_after_drafting_a_stop_token(pair):
    ctx, sampling = tiny.prompt_ids(), SamplingConfig(0.0)
    free = _drafter(pair).propose(ctx, 6, sampling, torch.Generator())
    stop = _drafter(pair, stop_ids=frozenset({free.drafted[2]})).propose(ctx, 6, sampling, torch.Generator())
    assert stop.drafted == free.drafted[:free.drafted.index(free.drafted[2]) + 1]
    assert stop.stopped == DraftStop.STOP_TOKEN


def test_the_round_records_why_drafting_stopped(pair):
    prompt = tiny.prompt_ids(seed=6)
    gen = Generation(pair, prompt, DecodeConfig(max_new_tokens=10, k=4, confidence=0.0, seed=1),
                     make_drafter("model", pair, stop_ids=frozenset())).run()
    done = 0
    for r in gen.rounds:  # a round drafts K unless fewer fit: it emits at most one token more than it drafts
        fits = min(4, 10 - done - 1)
        assert len(r.positions) == fits and r.draft_stop == (DraftStop.K if fits == 4 else DraftStop.BUDGET)
        done += len(r.emitted)
    assert DraftStop.BUDGET in {r.draft_stop for r in gen.rounds}
    sure = Generation(pair, prompt, DecodeConfig(max_new_tokens=10, k=4, confidence=0.9999, seed=1),
                      make_drafter("model", pair, stop_ids=frozenset())).run()
    assert sure.rounds[0].draft_stop == DraftStop.CONFIDENCE and len(sure.rounds[0].positions) == 1
    assert sure.rounds[0].positions[0].confidence < 0.9999


# ---- prompt lookup reads what a person sees ---------------------------------------------------

def test_lookup_never_matches_or_copies_hidden_markup():
    # context: <s> A B <e> | A B <s> A ... ; positions 0 and 3 (template markup) hidden
    ctx = [90, 1, 2, 91, 1, 2, 90]
    hidden = (True, False, False, True, False, False, False)
    d = LookupDrafter(vocab_size=100, hidden=hidden)
    sampling, g = SamplingConfig(), torch.Generator()
    assert d.propose(ctx, 3, sampling, g).drafted == []  # "90" at the end only matches hidden markup
    assert LookupDrafter(vocab_size=100).propose(ctx, 3, sampling, g).drafted == [1, 2, 91]  # without the mask
    # "1 2" matches the visible "1 2" at 1..2, but what follows it (91) is markup: nothing to copy there;
    # the match at 4..5 is the tail itself; so only earlier visible text is copied
    ctx2 = [90, 5, 1, 2, 7, 8, 91, 1, 2]
    d2 = LookupDrafter(vocab_size=100, hidden=(True, False, False, False, False, False, True, False, False))
    assert d2.propose(ctx2, 4, sampling, g).drafted == [7, 8]  # stops before the hidden 91


def test_the_engine_hides_the_chat_template_from_lookup():
    from specdec import ModelPair
    pair = tiny.pair(tiny.model(1, scale=4), None)
    ids, hidden = pair.encode_marked("w1 w2", chat=False)
    assert ids == pair.encode("w1 w2") and len(hidden) == len(ids) and not any(hidden)
    assert isinstance(pair, ModelPair)


def test_the_greedy_fast_path_proposes_what_the_general_path_does(pair):
    ctx, g, greedy = tiny.prompt_ids(), torch.Generator(), SamplingConfig(0.0)
    free = _drafter(pair).propose(ctx, 8, greedy, g)
    threshold = sorted(free.confidence)[len(free.confidence) // 2] + 1e-9  # stops mid-way
    fast = _drafter(pair).propose(ctx, 8, greedy, g, confidence=threshold)
    slow = _drafter(pair, fast_greedy=False).propose(ctx, 8, greedy, g, confidence=threshold)
    assert (fast.drafted, fast.stopped) == (slow.drafted, slow.stopped) and fast.stopped == DraftStop.CONFIDENCE
    assert fast.drafted == free.drafted[:len(fast.drafted)] and len(fast.drafted) < 8
    assert torch.equal(fast.probs, slow.probs)                          # one-hot at the argmax, row by row
    assert fast.confidence == pytest.approx(slow.confidence, rel=1e-5)


# ---- the hybrid drafter: prompt lookup where it matches, the model elsewhere -------------------

def test_hybrid_q_is_one_hot_on_lookup_tokens_and_the_models_q_otherwise(pair):
    from specdec.decode.drafters import HybridDrafter
    sampling = SamplingConfig(1.0)
    ctx = tiny.prompt_ids()
    repeated = ctx + ctx[:3] + ctx[:2]                    # the last two tokens occurred before: lookup copies
    hybrid = HybridDrafter(LookupDrafter(pair.vocab_size), _drafter(pair, context=repeated))
    copied = hybrid.propose(repeated, 3, sampling, torch.Generator().manual_seed(0))
    assert copied.source == DraftedBy.LOOKUP and copied.forward_s == 0.0
    assert copied.drafted == LookupDrafter(pair.vocab_size).propose(repeated, 3, sampling, torch.Generator()).drafted
    assert torch.equal(copied.probs[:-1], torch.nn.functional.one_hot(torch.tensor(copied.drafted), pair.vocab_size).float())
    # nothing to copy: exactly the model drafter's proposal, q and all, from the same generator state
    fresh = list(range(10, 16))
    hybrid = HybridDrafter(LookupDrafter(pair.vocab_size), _drafter(pair, context=fresh))
    modelled = hybrid.propose(fresh, 3, sampling, torch.Generator().manual_seed(0))
    expected = _drafter(pair, context=fresh).propose(fresh, 3, sampling, torch.Generator().manual_seed(0))
    assert modelled.source == DraftedBy.MODEL and modelled.drafted == expected.drafted
    assert torch.equal(modelled.probs, expected.probs)


def test_hybrid_greedy_output_is_the_verifiers_and_the_trace_says_who_drafted(pair):
    prompt = tiny.prompt_ids(seed=4) * 2                  # repeated text: some rounds copy, others model
    greedy = SamplingConfig(0.0)
    gen = Generation(pair, prompt, DecodeConfig(max_new_tokens=30, k=4, sampling=greedy),
                     make_drafter("hybrid", pair)).run()
    base = Generation(pair, prompt, DecodeConfig(max_new_tokens=30, sampling=greedy), make_drafter("none", pair)).run()
    assert gen.token_ids == base.token_ids
    assert {r.drafted_by for r in gen.rounds} == {DraftedBy.LOOKUP, DraftedBy.MODEL}
    from specdec.teach.render import draft_stop_text, explain
    for r in gen.rounds:  # the step-through says who drafted, and q's meaning follows
        said = draft_stop_text(r, 4, 0.0)
        assert said.startswith("Prompt lookup drafted" if r.drafted_by == DraftedBy.LOOKUP else
                               "The draft model drafted")
        if r.positions:
            assert ("q is one-hot" in explain(r, "draft", "hybrid")) == (r.drafted_by == DraftedBy.LOOKUP)
    # lookup rounds leave the draft model's cache behind; its next round catches up on every token
    assert any(r.draft_cache[0] < r.context_len - 1 for r in gen.rounds if r.drafted_by == DraftedBy.LOOKUP)
    assert all(r.draft_cache[0] == r.context_len + len(r.positions) - 1 for r in gen.rounds
               if r.drafted_by == DraftedBy.MODEL)


def test_mix_uniform_is_a_distribution():
    q = probs_from_logits(torch.randn(3, 50), SamplingConfig(0.7, top_k=5))
    for e in (0.0, 0.5, 1.0):
        m = mix_uniform(q, e)
        assert torch.allclose(m.sum(-1), torch.ones(3)) and (m >= 0).all()
    assert torch.allclose(mix_uniform(q, 1.0), torch.full((3, 50), 1 / 50))


