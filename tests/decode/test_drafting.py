"""The drafter's knobs the app lets a learner turn, and the numbers it reports about them, on tiny
random models: draft noise (lossless, q reported exactly), the adaptive stop rule in both
directions, prompt lookup that never reads the chat template, the count definitions of a run,
and the rule's histogram beside the argmax-draft bug."""
from __future__ import annotations

import pytest
import torch
from helpers import tiny
from helpers.scripted import ScriptedDrafter, hf_greedy

from specdec import (
    DecodeConfig,
    Generation,
    LookupDrafter,
    SamplingConfig,
    make_drafter,
)
from specdec.decode.drafters import (
    CONFIDENCE,
    LIMIT,
    STOP_TOKEN,
    ModelDrafter,
    mix_uniform,
    top_probability,
)
from specdec.decode.sampling import probs_from_logits
from specdec.teach.experiment import histogram
from specdec.teach.theory import acceptance, tokens_per_round, tokens_per_round_drafted
from specdec.trace import (
    ACCEPTED,
    AFTER_STOP,
    REJECTED,
    UNREACHED,
    Candidate,
    DraftPosition,
    summarize,
)
from specdec_ui.tabs.run import summary_markdown


def _drafter(pair, stop_ids=frozenset(), context=None):
    from specdec.model.devices import Clock
    d = ModelDrafter(pair.draft, pair.vocab_size, Clock(pair.device), stop_ids)
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
    assert free.stopped == LIMIT and len(free.drafted) == k and len(free.confidence) == k
    conf = free.confidence
    # each confidence is the draft's untempered top probability at that step
    first = top_probability(pair.draft(torch.tensor([ctx])).logits[0, -1, :pair.vocab_size])
    assert conf[0] == pytest.approx(first, rel=1e-4)
    # a threshold between the confidences: drafting ends right after the first one below it
    threshold = sorted(conf)[len(conf) // 2] + 1e-9
    cut = next(i for i, c in enumerate(conf) if c < threshold)
    stopped = _drafter(pair).propose(ctx, k, sampling, torch.Generator().manual_seed(2), confidence=threshold)
    assert stopped.drafted == free.drafted[:cut + 1] and stopped.stopped == CONFIDENCE
    assert all(c >= threshold for c in stopped.confidence[:-1]) and stopped.confidence[-1] < threshold
    # a threshold below every confidence never stops it; one above every one stops after one token
    low = _drafter(pair).propose(ctx, k, sampling, torch.Generator().manual_seed(2), confidence=min(conf) / 2)
    assert low.drafted == free.drafted and low.stopped == LIMIT
    high = _drafter(pair).propose(ctx, k, sampling, torch.Generator().manual_seed(2), confidence=0.9999)
    assert high.drafted == free.drafted[:1] and high.stopped == CONFIDENCE


def test_the_draft_stops_after_drafting_a_stop_token(pair):
    ctx, sampling = tiny.prompt_ids(), SamplingConfig(0.0)
    free = _drafter(pair).propose(ctx, 6, sampling, torch.Generator())
    stop = _drafter(pair, stop_ids=frozenset({free.drafted[2]})).propose(ctx, 6, sampling, torch.Generator())
    assert stop.drafted == free.drafted[:free.drafted.index(free.drafted[2]) + 1] and stop.stopped == STOP_TOKEN


def test_the_round_records_why_drafting_stopped(pair):
    prompt = tiny.prompt_ids(seed=6)
    gen = Generation(pair, prompt, DecodeConfig(max_new_tokens=10, k=4, confidence=0.0, seed=1),
                     make_drafter("model", pair, stop_ids=frozenset())).run()
    done = 0
    for r in gen.rounds:  # a round drafts K unless fewer fit: it emits at most one token more than it drafts
        fits = min(4, 10 - done - 1)
        assert len(r.positions) == fits and r.draft_stop == ("k" if fits == 4 else "budget")
        done += len(r.emitted)
    assert "budget" in {r.draft_stop for r in gen.rounds}
    sure = Generation(pair, prompt, DecodeConfig(max_new_tokens=10, k=4, confidence=0.9999, seed=1),
                      make_drafter("model", pair, stop_ids=frozenset())).run()
    assert sure.rounds[0].draft_stop == "confidence" and len(sure.rounds[0].positions) == 1
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


def test_the_greedy_fast_path_proposes_what_the_general_path_does(pair, monkeypatch):
    ctx, g, greedy = tiny.prompt_ids(), torch.Generator(), SamplingConfig(0.0)
    free = _drafter(pair).propose(ctx, 8, greedy, g)
    threshold = sorted(free.confidence)[len(free.confidence) // 2] + 1e-9  # stops mid-way
    fast = _drafter(pair).propose(ctx, 8, greedy, g, confidence=threshold)
    monkeypatch.setattr(ModelDrafter, "fast_greedy", False)
    slow = _drafter(pair).propose(ctx, 8, greedy, g, confidence=threshold)
    assert (fast.drafted, fast.stopped) == (slow.drafted, slow.stopped) and fast.stopped == CONFIDENCE
    assert fast.drafted == free.drafted[:len(fast.drafted)] and len(fast.drafted) < 8
    assert torch.equal(fast.probs, slow.probs)                          # one-hot at the argmax, row by row
    assert fast.confidence == pytest.approx(slow.confidence, rel=1e-5)


# ---- the hybrid drafter: prompt lookup where it matches, the model elsewhere -------------------

def test_hybrid_q_is_one_hot_on_lookup_tokens_and_the_models_q_otherwise(pair):
    from specdec.decode.drafters import LOOKUP, MODEL, HybridDrafter
    sampling = SamplingConfig(1.0)
    ctx = tiny.prompt_ids()
    repeated = ctx + ctx[:3] + ctx[:2]                    # the last two tokens occurred before: lookup copies
    hybrid = HybridDrafter(LookupDrafter(pair.vocab_size), _drafter(pair, context=repeated))
    copied = hybrid.propose(repeated, 3, sampling, torch.Generator().manual_seed(0))
    assert copied.source == LOOKUP and copied.forward_s == 0.0
    assert copied.drafted == LookupDrafter(pair.vocab_size).propose(repeated, 3, sampling, torch.Generator()).drafted
    assert torch.equal(copied.probs[:-1], torch.nn.functional.one_hot(torch.tensor(copied.drafted), pair.vocab_size).float())
    # nothing to copy: exactly the model drafter's proposal, q and all, from the same generator state
    fresh = list(range(10, 16))
    hybrid = HybridDrafter(LookupDrafter(pair.vocab_size), _drafter(pair, context=fresh))
    modelled = hybrid.propose(fresh, 3, sampling, torch.Generator().manual_seed(0))
    expected = _drafter(pair, context=fresh).propose(fresh, 3, sampling, torch.Generator().manual_seed(0))
    assert modelled.source == MODEL and modelled.drafted == expected.drafted
    assert torch.equal(modelled.probs, expected.probs)


def test_hybrid_greedy_output_is_the_verifiers_and_the_trace_says_who_drafted(pair):
    prompt = tiny.prompt_ids(seed=4) * 2                  # repeated text: some rounds copy, others model
    greedy = SamplingConfig(0.0)
    gen = Generation(pair, prompt, DecodeConfig(max_new_tokens=30, k=4, sampling=greedy),
                     make_drafter("hybrid", pair)).run()
    base = Generation(pair, prompt, DecodeConfig(max_new_tokens=30, sampling=greedy), make_drafter("none", pair)).run()
    assert gen.token_ids == base.token_ids
    assert {r.drafted_by for r in gen.rounds} == {"lookup", "model"}
    from specdec.teach.render import draft_stop_text, explain
    for r in gen.rounds:  # the step-through says who drafted, and q's meaning follows
        said = draft_stop_text(r, 4, 0.0)
        assert said.startswith("Prompt lookup drafted" if r.drafted_by == "lookup" else "The draft model drafted")
        if r.positions:
            assert ("q is one-hot" in explain(r, "draft", "hybrid")) == (r.drafted_by == "lookup")
    # lookup rounds leave the draft model's cache behind; its next round catches up on every token
    assert any(r.draft_cache[0] < r.context_len - 1 for r in gen.rounds if r.drafted_by == "lookup")
    assert all(r.draft_cache[0] == r.context_len + len(r.positions) - 1 for r in gen.rounds if r.drafted_by == "model")


# ---- the numbers of a run, defined on a scripted one ------------------------------------------

def test_count_definitions_on_a_scripted_run():
    """Scripted: round 1 keeps 2 of 4 (rejects the 3rd, the 4th untested); round 2 keeps all 4 and
    a bonus; then a stop token kept in the middle of round 3's drafts."""
    target = tiny.model(7, scale=8)
    pair = tiny.pair(target, None)
    pair.stop_ids = frozenset()
    prompt = tiny.prompt_ids(seed=7)
    truth = hf_greedy(target, prompt, eos=None)
    pair.stop_ids = frozenset({truth[9]})  # the 10th token stops the output: round 3 starts at output 8
    drafter = ScriptedDrafter(truth, {2}, len(prompt), pair.vocab_size)
    gen = Generation(pair, prompt, DecodeConfig(max_new_tokens=30, k=4, confidence=0.0, sampling=SamplingConfig(0.0)),
                     drafter).run()
    r1, r2, r3 = gen.rounds
    assert [p.status for p in r1.positions] == [ACCEPTED, ACCEPTED, REJECTED, UNREACHED]
    assert [p.status for p in r2.positions] == [ACCEPTED] * 4 and r2.next_kind == "bonus"
    assert [p.status for p in r3.positions] == [ACCEPTED, ACCEPTED, AFTER_STOP, AFTER_STOP]
    assert (r1.drafted, r1.tested, r2.tested, r3.drafted, r3.tested) == (4, 3, 4, 2, 2)
    s = summarize(gen.rounds, gen.prefill_s)
    assert (s.accepted, s.drafted, s.new_tokens, s.rounds) == (8, 10, 10, 3)
    assert acceptance(gen.rounds) == pytest.approx(8 / 9)  # kept / tested: the untested one does not count
    # a_i = P(position i kept | position i reached and drafted), as the summary, notebook 03 and the sweep give it:
    # positions 1 and 2 reached in all three rounds and kept; position 3 reached in rounds 1 (rejected) and 2
    # (kept); position 4 only in round 2 (round 1's was after the rejection, round 3's after the stop token)
    assert s.per_position_acceptance == (1.0, 1.0, 0.5, 1.0)
    text = summary_markdown(s, gen.rounds)
    assert "drafts kept / tested = 8 / 9" in text and "kept / drafted" not in text  # one acceptance number: a
    assert "**3 rounds**, **4 verifier passes**" in text and "10 tokens / 3 rounds" in text
    assert "**3.33 drafted per round**" in text
    # round 3 ended at its kept stop token and drew nothing: 10 tokens are 8 kept + 2 drawn, not 8 + 3 rounds
    assert r3.next_kind is None and s.new_tokens == s.accepted + sum(r.next_kind is not None for r in gen.rounds)
    assert ("10 = 8 drafts kept + 2 drawn by the verifier (the resampled or bonus token: one per round, none in the "
            "1 round that ended at a stop token among the kept drafts)") in text
    assert tokens_per_round(1.0, 4) == 5 and tokens_per_round(0.0, 4) == 1
    assert tokens_per_round(0.5, 1) == pytest.approx(1.5)
    assert tokens_per_round_drafted(0.5, [1, 3]) == pytest.approx((1.5 + 1.875) / 2)


# ---- the rule, run many times on one position -------------------------------------------------

def _position(p: list[float], q: list[float]) -> DraftPosition:
    cands = tuple(Candidate(i, f"t{i}", a, b) for i, (a, b) in enumerate(zip(p, q)))
    return DraftPosition(0, "t0", q[0], p[0], p[0] / q[0], 0.5, sum(map(min, p, q)), ACCEPTED, cands)


def test_the_rules_histogram_is_p_and_the_argmax_bugs_is_not():
    h = histogram(_position([0.2, 0.5, 0.2], [0.6, 0.2, 0.1]), 20_000)
    assert h.labels[-1] == "(all other tokens)" and sum(h.p) == pytest.approx(1.0)
    assert h.p[:3] == pytest.approx((0.2, 0.5, 0.2)) and h.p[3] == pytest.approx(0.1)
    assert h.tv_correct < 0.02 and h.tv_bug > 0.1
    # where q's argmax is p's too and q is one-hot, the bug changes nothing: the histogram cannot tell
    same = histogram(_position([0.7, 0.2, 0.1], [1.0, 0.0, 0.0]), 20_000)
    assert same.tv_correct < 0.02 and same.tv_bug < 0.02


def test_the_bugs_exact_distribution_is_what_it_emits_and_vanishes_only_where_it_must():
    from specdec.teach.experiment import bug_tv, emitted, exact_emitted, lumped
    pos = _position([0.2, 0.5, 0.2], [0.6, 0.2, 0.1])
    _, p, q = lumped(pos)
    sampled = emitted(p, q, 40_000, torch.Generator().manual_seed(0), bug="argmax")
    exact = exact_emitted(p, q, "argmax")
    assert torch.allclose(exact, sampled, atol=0.01) and exact.sum() == pytest.approx(1.0)
    assert bug_tv(pos) == pytest.approx(0.5 * float((exact - p).abs().sum())) and bug_tv(pos) > 0.1
    assert bug_tv(_position([0.7, 0.2, 0.1], [1.0, 0.0, 0.0])) == pytest.approx(0.0, abs=1e-6)  # q one-hot
    assert bug_tv(_position([1.0, 0.0, 0.0], [0.5, 0.3, 0.2])) == pytest.approx(0.0, abs=1e-6)  # p one-hot on x*
    assert bug_tv(_position([0.5, 0.5], [0.5, 0.5])) == pytest.approx(0.5, abs=1e-6)  # p = q spread: not enough


def test_mix_uniform_is_a_distribution():
    q = probs_from_logits(torch.randn(3, 50), SamplingConfig(0.7, top_k=5))
    for e in (0.0, 0.5, 1.0):
        m = mix_uniform(q, e)
        assert torch.allclose(m.sum(-1), torch.ones(3)) and (m >= 0).all()
    assert torch.allclose(mix_uniform(q, 1.0), torch.full((3, 50), 1 / 50))


# ---- the one cost fit, the one noise bound, the figures' data ----------------------------------

def test_the_cost_fit_the_bound_and_the_round_timeline_by_hand():
    from specdec.model.timing import fit_line
    from specdec.teach.experiment import overlap, tv_distance, tv_noise_bound
    from specdec.teach.theory import round_timeline
    assert fit_line([1, 2, 3], [3.0, 5.0, 7.0]) == pytest.approx((1.0, 2.0))             # t(L) = 1 + 2 L exactly
    assert fit_line([1, 1, 3, 3], [2.0, 4.0, 6.0, 8.0]) == pytest.approx((1.0, 2.0))     # repeated rows: every point
    assert fit_line([5, 5], [2.0, 4.0]) == (3.0, 0.0)                                   # no spread in L: flat, the mean
    with pytest.raises(ValueError, match="as many rows as times"):
        fit_line([1, 2], [1.0])
    p, q = torch.tensor([0.5, 0.5, 0.0]), torch.tensor([0.25, 0.25, 0.5])
    shared, residual, excess, beta = overlap(p, q)
    assert torch.equal(shared + residual, p) and torch.equal(shared + excess, q) and beta == 0.5
    assert tv_distance(p, q) == pytest.approx(0.5) and tv_noise_bound(torch.tensor([0.0, 1.0]), 10) == 0.0
    assert tv_noise_bound(torch.tensor([0.5, 0.5]), 100) == pytest.approx(1.5 * 2 * 0.05)
    steps = round_timeline(2, 0.25, 1.5)                  # 2 drafts at 0.25, a verification of 3 rows at 1.5: 2 steps
    assert [(s[0], s[2], s[3]) for s in steps] == [("speculative", 0.0, 0.25), ("speculative", 0.25, 0.25),
                                                   ("speculative", 0.5, 1.5), ("plain", 0.0, 1.0), ("plain", 1.0, 1.0)]


def test_the_cost_model_on_rounds_whose_times_are_set_by_hand():
    """The numbers of Compare's "Why this speed-up?" (and notebooks 03 and 05), on rounds whose times
    are set by hand: verifier-only rounds of 100 ms each; speculative rounds drafting 4 tokens in 40 ms
    and verifying their 5 rows in 150 ms, the first keeping 2 (a rejection: 3 tested, 3 tokens), the
    second all 4 and a bonus (5 tokens)."""
    from types import SimpleNamespace as R

    from specdec.teach.theory import cost_model, decode_tokens_per_s

    def rnd(draft, total, drafted=0, tested=0, kept=0, tokens=1):
        return R(times=R(draft=draft, total=total), drafted=drafted, tested=tested, n_accepted=kept,
                 emitted=[0] * tokens)
    base = [rnd(0.0, 0.1) for _ in range(4)]
    spec = [rnd(0.04, 0.19, 4, 3, 2, 3), rnd(0.04, 0.19, 4, 4, 4, 5)]
    m = cost_model(base, spec)
    assert decode_tokens_per_s(base) == pytest.approx(10.0) and decode_tokens_per_s(spec) == pytest.approx(8 / 0.38)
    assert m.t1 == pytest.approx(0.1) and m.c == pytest.approx(0.1)            # 10 ms per drafted token / 100 ms
    assert (m.t_f, m.t_r) == pytest.approx((0.0875, 0.0125))                  # the line through (1, 100) and (5, 150) ms
    assert m.v(4) == pytest.approx(1.5) and m.a == pytest.approx(6 / 7) and m.k_mean == 4
    assert m.measured == pytest.approx((8 / 0.38) / 10.0)
    assert m.speedup(4) == pytest.approx(tokens_per_round(6 / 7, 4) / (4 * 0.1 + 1.5))
    assert cost_model(base, [rnd(0.0, 0.1)]) is None                           # nothing drafted: no model
