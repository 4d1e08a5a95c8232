"""The adaptive draft length (specdec.decode.pacing): the choice from acceptance and costs, its
learning from rounds, and that a paced run stays lossless. Costs are given, never timed, so every
round's choice is reproducible."""
import json

import pytest
from helpers import tiny

from specdec import DecodeConfig, Generation, make_drafter
from specdec.decode.pacing import DECAY, PRIOR_A, Pacer, RoundCosts, expected_tokens
from specdec.decode.start import make_pacer
from specdec.options import ConfigError
from specdec.trace import DraftStop, TraceFile

# a CPU-like round: the verifier's forward costs 40 ms at one row and 3 ms per extra row,
# a draft forward 12 ms, the rest of the round 2 ms
CPU = RoundCosts({1: 40.0, 7: 58.0, 13: 76.0}, draft=12.0, rest=2.0)


def test_expected_tokens_is_one_plus_the_chance_of_reaching_each_position():
    assert expected_tokens([0.5, 0.5, 0.5], 0) == 1
    assert expected_tokens([0.5, 0.5, 0.5], 3) == pytest.approx(1 + 0.5 + 0.25 + 0.125)
    assert expected_tokens([1.0, 0.0, 1.0], 3) == 2  # nothing is reached past a sure rejection


def test_round_cost_interpolates_the_timed_rows_and_extends_the_last_slope():
    assert CPU.forward(1) == 40 and CPU.forward(4) == pytest.approx(49) and CPU.forward(16) == pytest.approx(85)
    assert CPU.round_ms(0) == 42 and CPU.round_ms(3) == pytest.approx(3 * 12 + 49 + 2)
    with pytest.raises(ValueError, match="L = 1"):
        RoundCosts({7: 5.0, 13: 6.0}, draft=1.0)


def _paced(kept_per_round: list[int], k_max: int = 6, costs: RoundCosts = CPU) -> Pacer:
    """A pacer that has seen rounds keeping these many drafts of ``k_max`` (the next one rejected)."""
    from types import SimpleNamespace
    pacer = Pacer(costs, k_max)
    for kept in kept_per_round:
        positions = [SimpleNamespace(tested=i <= kept, status="accepted" if i < kept else "rejected")
                     for i in range(k_max)]
        pacer.update(SimpleNamespace(tree=None, positions=positions, times=SimpleNamespace(total=0.006, forward=0.001)))
    return pacer


def test_a_draft_that_keeps_missing_is_not_asked_and_one_that_keeps_hitting_drafts_k():
    assert _paced([0] * 12).plan(6).k == 0      # every first draft rejected: a plain verifier step pays best
    assert _paced([6] * 12).plan(6).k >= 5      # every draft kept: about as many as allowed
    cheap = RoundCosts(CPU.verify, draft=4.0, rest=2.0)
    assert _paced([6] * 12, costs=cheap).plan(6).k == 6  # with a cheap draft, all of them
    assert _paced([6] * 12).plan(2).k == 2      # never more than the budget allows


def test_a_free_draft_drafts_even_at_low_acceptance_and_a_costly_one_does_not():
    free = RoundCosts(CPU.verify, draft=0.0, rest=2.0)
    costly = RoundCosts(CPU.verify, draft=40.0, rest=2.0)
    history = [1, 0, 2, 1, 0, 1]  # about 40 % of first drafts kept
    assert _paced(history, costs=free).plan(6).k > 0
    assert _paced(history, costs=costly).plan(6).k == 0


def test_the_prior_decides_the_first_round_and_the_counts_decay():
    from types import SimpleNamespace
    first = Pacer(CPU, 4).plan(4)
    assert first.acceptance == (PRIOR_A,) * 4 and first.evidence == (0.0,) * 4
    pacer = _paced([4, 4])
    assert pacer.tested[0] == pytest.approx(1 + DECAY)
    # a run that stopped drafting drifts back to the prior and tries again
    stopped = _paced([0] * 12)
    assert stopped.plan(6).k == 0
    for _ in range(200):
        stopped.update(SimpleNamespace(tree=None, positions=(), times=SimpleNamespace(total=0.003, forward=0.001)))
    assert stopped.plan(6).k == Pacer(CPU, 6).plan(6).k > 0


def test_plan_says_what_each_k_was_expected_to_return_and_cost():
    plan = _paced([3, 2, 4]).plan(6)
    assert len(plan.tokens) == len(plan.ms) == 7
    assert Pacer(CPU, 6).plan(6).ms[0] == pytest.approx(40 + 2)  # before any round: the timed rest
    assert plan.ms[0] == pytest.approx(40 + 5)  # then the run's own rounds' 5 ms besides their forwards
    rates = [t / m for t, m in zip(plan.tokens, plan.ms)]
    assert rates[plan.k] == max(rates)


def _tiny_pair(noise: float):
    target = tiny.model(3, scale=8)
    pair = tiny.pair(target, tiny.noisy_copy(target, 5, noise))
    pair.stop_ids = frozenset()
    return pair


@pytest.mark.parametrize("noise", [0.0, 0.6, 3.0])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_paced_run_is_lossless_and_records_its_plans(noise, temperature):
    """T = 0: the same tokens as verifier-only; T > 0: the rounds are well-formed and K follows the plan.
    Noise 3 makes an unrelated draft (the pacer stops drafting), 0 the verifier itself (it drafts K)."""
    from specdec.options import SamplingConfig
    pair, prompt = _tiny_pair(noise), tiny.prompt_ids(seed=3)
    cfg = DecodeConfig(max_new_tokens=60, k=5, adaptive=True, confidence=0.0, sampling=SamplingConfig(temperature=temperature))
    gen = Generation(pair, prompt, cfg, make_drafter("model", pair), pacer=Pacer(CPU, cfg.k)).run()
    for r in gen.rounds:
        assert r.plan is not None and r.drafted <= r.plan.k
        assert r.draft_stop != DraftStop.PACED or (r.drafted == r.plan.k < cfg.k)
    if temperature == 0:
        baseline = Generation(pair, prompt, cfg, make_drafter("none", pair)).run()
        assert gen.token_ids == baseline.token_ids
    ks = [r.plan.k for r in gen.rounds]
    if noise == 0:
        assert max(ks) == cfg.k  # everything kept: the pacer drafts all it may
    if noise == 3.0 and temperature == 0:
        assert 0 in ks and ks[0] > 0                 # it tried the prior's K, then stopped drafting
        assert any(r.draft_stop == DraftStop.PACED and r.drafted == 0 for r in gen.rounds)


def test_a_paced_trace_reads_back_with_its_plans():
    pair, prompt = _tiny_pair(0.6), tiny.prompt_ids(seed=3)
    cfg = DecodeConfig(max_new_tokens=20, k=4, adaptive=True)
    gen = Generation(pair, prompt, cfg, make_drafter("model", pair), pacer=Pacer(CPU, cfg.k)).run()
    raw = TraceFile({}, tuple(gen.rounds), gen.prefill_s, gen.text, gen.stop_reason).to_json()
    back = TraceFile.from_json(raw)
    assert back.rounds == tuple(gen.rounds)
    data = json.loads(raw)
    data["rounds"][0]["plan"]["acceptance"][0] = 1.5
    with pytest.raises(ValueError, match=r"plan\.acceptance\[0\] must be a number in \[0, 1\]"):
        TraceFile.from_json(json.dumps(data))


@pytest.mark.parametrize("drafter", ["tree", "lookup", "none"])
def test_the_drafters_that_choose_k_otherwise_ignore_adaptive(drafter):
    pair = _tiny_pair(0.6)
    assert make_pacer(pair, DecodeConfig(adaptive=True), drafter) is None
    assert make_pacer(pair, DecodeConfig(), "model") is None


def test_adaptive_needs_the_lean_forward_to_time_its_costs():
    pair = _tiny_pair(0.6)  # transformers' models: nothing to time the costs with
    with pytest.raises(ConfigError, match="lean Qwen2") as e:
        make_pacer(pair, DecodeConfig(adaptive=True), "model")
    assert e.value.field == "adaptive"


def _paced_run(noise: float, n: int = 40):
    pair, prompt = _tiny_pair(noise), tiny.prompt_ids(seed=3)
    cfg = DecodeConfig(max_new_tokens=n, k=5, adaptive=True, confidence=0.0)
    return Generation(pair, prompt, cfg, make_drafter("model", pair), pacer=Pacer(CPU, cfg.k)).run()


def test_the_step_text_says_why_a_round_drafted_what_it_did():
    from specdec.teach.render import draft_stop_text, explain
    gen = _paced_run(3.0)
    nothing = next(r for r in gen.rounds if r.plan.k == 0)
    text = explain(nothing, "draft")
    assert "Adaptive K drafted nothing" in text and "a draft costs more than it returns" in text
    assert f"{nothing.plan.acceptance[0]:.0%} acceptance" in text and "plain verifier step" in text
    some = next(r for r in gen.rounds if 0 < r.plan.k < 5)
    said = draft_stop_text(some, 5, 0.0)
    assert said.startswith(f"Drafted {some.drafted} token") and "fewer than K = 5" in said
    assert f"a1 = {some.plan.acceptance[0]:.2f}" in said
