"""The adaptive draft length (specdec.decode.pacing): the choice from acceptance and costs, its
learning from rounds, and that a paced run stays lossless. Costs are given, never timed, so every
round's choice is reproducible."""
import json
from dataclasses import replace
from types import SimpleNamespace

import pytest
from helpers import tiny

from specdec import DecodeConfig, Generation, make_drafter
from specdec.decode.pacing import DECAY, PRIOR_A, Pacer, RoundCosts, forecast
from specdec.decode.start import make_pacer
from specdec.decode.tree_shape import candidates
from specdec.options import ConfigError
from specdec.trace import ACCEPTED, REJECTED, ROOT, UNTESTED, DraftStop, TraceFile

# a CPU-like round: the verifier's forward costs 40 ms at one row and 3 ms per extra row,
# a draft forward 12 ms, the rest of the round 2 ms
CPU = RoundCosts({1: 40.0, 7: 58.0, 13: 76.0}, draft=12.0, rest=2.0)


def test_a_chains_forecast_is_one_plus_the_chance_of_reaching_each_position_and_its_forwards():
    a, e = ((0.5,), (0.5,), (0.5,)), ((1.0,),) * 3
    assert forecast(a, e, 1, 0, 0, CPU) == (1, 40 + 2)  # K = 0: a plain verifier step
    tokens, ms = forecast(a, e, 1, 3, 3, CPU)
    assert tokens == pytest.approx(1 + 0.5 + 0.25 + 0.125) and ms == pytest.approx(3 * 12 + 49 + 2)
    assert forecast(((1.0,), (0.0,), (1.0,)), e, 1, 3, 3, CPU)[0] == 2  # nothing is reached past a sure rejection


def test_a_trees_forecast_sums_the_chance_of_keeping_each_path_and_verifies_the_nodes_e_drafts():
    """Width 2, depth 2: the root's two children, then two each; the budget stops the drafter mid-depth."""
    a, e = ((0.5, 0.3), (0.4, 0.2)), ((1.0, 0.5), (1.0, 0.5))
    costs = RoundCosts({1: 10.0, 11: 20.0}, draft=2.0, rest=1.0, draft_row=1.0)  # 1 ms per row verified or drafted
    # a node's chance to be kept once its parent was: drafted, its elder sibling rejected, itself kept
    first, second = 0.5, 0.5 * (1 - 0.5) * 0.3                     # depth 1
    deep_first, deep_second = 0.4, 0.5 * (1 - 0.4) * 0.2           # depth 2
    tokens, ms = forecast(a, e, 2, 10, 2, costs)
    assert tokens == pytest.approx(1 + first + second + (first + second) * (deep_first + deep_second))
    rows = 1 + 1 + 0.5 + 1 + 0.5 + 0.5 + 0.25                     # the root, then each node's chance to be drafted
    assert ms == pytest.approx(2 + (2 + 0.5) + (10 + (rows - 1)) + 1)  # draft forwards over 1 and 1.5 rows, t(rows), rest
    tokens, ms = forecast(a, e, 2, 3, 2, costs)                        # room for 3 nodes: the 4th is not drafted
    assert tokens == pytest.approx(1 + first + second + first * (deep_first + deep_second))
    assert ms == pytest.approx(2 + 2.5 + (10 + 3) + 1)


def test_round_cost_interpolates_the_timed_rows_and_extends_the_last_slope():
    assert CPU.forward(1) == 40 and CPU.forward(4) == pytest.approx(49) and CPU.forward(16) == pytest.approx(85)
    assert RoundCosts(CPU.verify, draft=12.0, draft_row=1.5).drafting(3) == 15
    with pytest.raises(ValueError, match="L = 1"):
        RoundCosts({7: 5.0, 13: 6.0}, draft=1.0)


def _paced(kept_per_round: list[int], k_max: int = 6, costs: RoundCosts = CPU) -> Pacer:
    """A pacer that has seen rounds keeping these many drafts of ``k_max`` (the next one rejected)."""
    pacer = Pacer(costs, k_max)
    for kept in kept_per_round:
        positions = [SimpleNamespace(tested=i <= kept, status="accepted" if i < kept else "rejected")
                     for i in range(k_max)]
        forward = costs.forwards(k_max, k_max) / 1e3  # the forwards as long as the table says
        pacer.update(SimpleNamespace(tree=None, positions=positions,
                                     times=SimpleNamespace(total=forward + 0.005, forward=forward)))
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
    first = Pacer(CPU, 4).plan(4)
    assert first.acceptance == (PRIOR_A,) * 4 and first.evidence == (0.0,) * 4
    pacer = _paced([4, 4])
    assert pacer.kept[0][0].tries == pytest.approx(1 + DECAY)
    # a run that stopped drafting drifts back to the prior and tries again
    stopped = _paced([0] * 12)
    assert stopped.plan(6).k == 0
    for _ in range(200):
        stopped.update(SimpleNamespace(tree=None, positions=(), times=SimpleNamespace(total=0.042, forward=0.040)))
    assert stopped.plan(6).k == Pacer(CPU, 6).plan(6).k > 0


def test_each_k_is_charged_the_rest_of_a_round_with_that_many_drafts():
    """A round's work besides its forwards grows with its drafts (each one's sampling, test and record):
    a plain step is charged r_0, K drafts r_0 + K r_d; the run's rounds move r_0 by their median
    difference from that line and keep the machine's r_d."""
    costs = RoundCosts(CPU.verify, draft=12.0, rest=5.0, rest_per_draft=4.0)
    plan = Pacer(costs, 6).plan(6)
    assert plan.ms[0] == pytest.approx(40 + 5)
    assert plan.ms[3] == pytest.approx(3 * 12 + costs.forward(4) + 5 + 3 * 4)
    pacer = Pacer(costs, 6)
    for k, rest_ms in ((3, 5 + 12 + 2), (0, 5 + 2), (6, 5 + 24 + 2)):  # each 2 ms above the line
        positions = tuple(SimpleNamespace(tested=True, status=ACCEPTED) for _ in range(k))
        forward = costs.forwards(k, k) / 1e3
        pacer.update(SimpleNamespace(tree=None, positions=positions,
                                     times=SimpleNamespace(total=forward + rest_ms / 1e3, forward=forward)))
    plan = pacer.plan(6)
    assert plan.ms[0] == pytest.approx(40 + 7)
    assert plan.ms[2] == pytest.approx(2 * 12 + costs.forward(3) + 7 + 2 * 4)


def test_the_tables_forwards_are_scaled_to_the_runs_own_and_can_flip_the_choice():
    """The table's forwards are the fastest of a few at one context on a quiet machine; a run measures
    its own. Rounds whose forwards take 1.25x the table's make every forward 1.25x dearer in the plan:
    with a dear rest per draft, a plain step (its forward only) then beats drafting it did not beat."""
    costs = RoundCosts({1: 40.0, 7: 58.0, 13: 76.0}, draft=6.0, rest=2.0, rest_per_draft=0.0)
    fresh = Pacer(costs, 6)
    assert fresh.plan(6).ms[0] == pytest.approx(40 + 2)
    slow = Pacer(costs, 6)
    for k in (0, 3, 6, 1):
        positions = tuple(SimpleNamespace(tested=True, status=ACCEPTED) for _ in range(k))
        forward = 1.25 * costs.forwards(k, k) / 1e3
        slow.update(SimpleNamespace(tree=None, positions=positions,
                                    times=SimpleNamespace(total=forward + 0.002, forward=forward)))
    plan = slow.plan(6)
    assert plan.ms[0] == pytest.approx(1.25 * 40 + 2)
    assert plan.ms[4] == pytest.approx(1.25 * (4 * 6 + costs.forward(5)) + 2)
    assert costs.forwards(3, 3) == 3 * 6 + costs.forward(4)  # a chain: one draft forward per draft
    tree = replace(costs, draft_row=1.0)
    assert tree.forwards(8, 3) == 3 * 6 + 5 * 1.0 + tree.forward(9)  # a tree: one per depth, more rows


def test_where_the_prior_says_a_plain_step_it_tries_a_draft_until_the_run_has_evidence():
    """An AVX2-like machine: at the prior's 60 % a draft does not pay, at 90 % it does. With no evidence
    the pacer asks again with the first draft's share raised by its uncertainty, and drafts (explored);
    once its tests outweigh the prior it follows them: K = 0 where drafts are rejected, drafting where kept."""
    from specdec.teach.render import plan_text
    dear = RoundCosts({1: 42.0, 7: 124.0, 13: 221.0}, draft=15.0, rest=8.0, rest_per_draft=2.0)
    a, e = Pacer(dear, 6).shares()
    assert Pacer(dear, 6)._plan(a, e, 6, dear).k == 0          # the prior alone: a plain step
    first = Pacer(dear, 6).plan(6)
    assert first.k > 0 and first.explored and first.acceptance[0] > 0.6
    assert "raised by its uncertainty" in plan_text(first)
    missed = _paced([0] * 3, costs=dear)
    assert missed.plan(6).k == 0 and not missed.plan(6).explored
    kept = _paced([6] * 3, costs=dear)
    assert kept.plan(6).k > 0 and not kept.plan(6).explored


def test_plan_says_what_each_k_was_expected_to_return_and_cost():
    plan = _paced([3, 2, 4]).plan(6)
    assert len(plan.tokens) == len(plan.ms) == 7
    assert Pacer(CPU, 6).plan(6).ms[0] == pytest.approx(40 + 2)  # before any round: the timed rest
    assert plan.ms[0] == pytest.approx(40 + 5)  # then the run's own rounds' 5 ms besides their forwards
    rates = [t / m for t, m in zip(plan.tokens, plan.ms)]
    assert rates[plan.k] == max(rates)


# a CPU where verifying and drafting more rows is cheap (AVX-512 with VNNI or AMX): a tree's extra rows cost little
FLAT = RoundCosts({1: 40.0, 7: 43.0, 13: 46.0, 25: 52.0}, draft=4.0, rest=2.0, draft_row=0.5)
SHAPES = candidates(DecodeConfig())


def _times(drafted: int, depth: int, costs: RoundCosts = FLAT) -> SimpleNamespace:
    """A round's phase times whose forwards take what ``costs`` says, and 5 ms besides."""
    forward = costs.forwards(drafted, depth) / 1e3
    return SimpleNamespace(total=forward + 0.005, forward=forward)


def _tree_round(kept_rank: int | None, depth: int = 4, width: int = 2):
    """A tree round with ``width`` children at each depth down one path, where the child of rank
    ``kept_rank`` (0: the first) is kept and expanded; None: every child of the root rejected."""
    def status(rank):
        return REJECTED if kept_rank is None or rank < kept_rank else ACCEPTED if rank == kept_rank else UNTESTED
    nodes, parent = [SimpleNamespace(parent=-1, depth=0, status=ROOT)], 0
    for d in range(1, depth + 1):
        nodes += [SimpleNamespace(parent=parent, depth=d, status=status(rank)) for rank in range(width)]
        if kept_rank is None:
            break
        parent = len(nodes) - width + kept_rank
    return SimpleNamespace(tree=SimpleNamespace(nodes=tuple(nodes), width=width, budget=12), positions=(),
                           times=_times(len(nodes) - 1, max(n.depth for n in nodes)))


def _tree_paced(rounds) -> Pacer:
    pacer = Pacer(FLAT, 4, SHAPES)
    for r in rounds:
        pacer.update(r)
    return pacer


def test_the_pacer_grows_a_tree_where_second_children_are_kept_and_falls_back_to_a_chain_or_to_nothing():
    """Constructed rounds, given costs: a tree where the draft's second guess is the verifier's token, the
    chain of K where its first guess is and its second is not, a plain verifier step where neither is;
    then a prompt that changes character (the first guess right from now on) is followed within tens of
    rounds."""
    second = _tree_paced([_tree_round(1)] * 20)
    plan = second.plan(4)
    assert plan.width > 1 and plan.budget in (n for _, n in SHAPES) and plan.k == 4
    assert plan.acceptance[0] < 0.1 < 0.9 < plan.siblings[0][0] and len(plan.trees) == len(SHAPES)
    first = _tree_paced([_tree_round(0)] * 20).plan(4)
    assert (first.width, first.k) == (1, 4)
    # half the first children kept, and the second and third children tested when they are not, never kept
    missed = _tree_paced([_tree_round(0, width=3), _tree_round(None, width=3)] * 20).plan(4)
    assert (missed.width, missed.k) == (1, 4) and missed.siblings[0][0] < 0.2
    assert _tree_paced([_tree_round(None)] * 20).plan(4).k == 0
    assert _tree_paced([_tree_round(1)] * 20).plan(2).k == 2  # never deeper than the budget allows
    kept = SimpleNamespace(tree=None, positions=[SimpleNamespace(tested=True, status=ACCEPTED)] * 4, times=_times(4, 4))
    for _ in range(60):
        second.update(kept)
    assert (second.plan(4).width, second.plan(4).k) == (1, 4)


def test_a_tree_round_counts_each_tested_child_by_depth_and_rank_and_the_children_each_node_was_given():
    def counts(table):  # (hits, tries) of the first two ranks at the first two depths
        return [[(s.hits, s.tries) for s in row[:2]] for row in table[:2]]
    second = _tree_paced([_tree_round(1, depth=2)])
    assert counts(second.kept) == [[(0, 1), (1, 1)], [(0, 1), (1, 1)]]
    assert counts(second.given) == [[(1, 1), (1, 1)], [(1, 1), (1, 1)]]
    first = _tree_paced([_tree_round(0, depth=2)])
    assert counts(first.kept) == [[(1, 1), (0, 0)], [(1, 1), (0, 0)]]  # a sibling after a kept one: untested
    full = _tree_round(1, depth=2)
    full.tree.budget = 4  # the budget was spent: the last depth's parents may have lost children to it
    assert counts(_tree_paced([full]).given) == [[(1, 1), (1, 1)], [(1, 1), (0, 0)]]


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
    gen = Generation(pair, prompt, cfg, make_drafter("model", pair), pacer=Pacer(CPU, cfg.k, timed=False)).run()
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
    gen = Generation(pair, prompt, cfg, make_drafter("model", pair), pacer=Pacer(CPU, cfg.k, timed=False)).run()
    raw = TraceFile({}, tuple(gen.rounds), gen.prefill_s, gen.text, gen.stop_reason).to_json()
    back = TraceFile.from_json(raw)
    assert back.rounds == tuple(gen.rounds)
    data = json.loads(raw)
    data["rounds"][0]["plan"]["acceptance"][0] = 1.5
    with pytest.raises(ValueError, match=r"plan\.acceptance\[0\] must be a number in \[0, 1\]"):
        TraceFile.from_json(json.dumps(data))


@pytest.mark.parametrize("drafter", ["lookup", "none"])
def test_the_drafters_that_choose_k_otherwise_ignore_adaptive(drafter):
    pair = _tiny_pair(0.6)
    assert make_pacer(pair, DecodeConfig(adaptive=True), drafter) is None
    assert make_pacer(pair, DecodeConfig(), "model") is None


def test_the_tree_drafters_pacer_weighs_the_measured_shapes_within_the_runs_w_and_n(monkeypatch):
    import specdec.decode.start
    from specdec.decode.start import start
    timed = {"verify_ms": {"1": 40.0, "7": 58.0}, "draft_ms": {"1": 12.0, "4": 18.0}, "draft": [10.0, 2.0],
             "round": 2.0}
    monkeypatch.setattr(specdec.decode.start, "machine_costs", lambda pair: timed)
    pair = _lean_pair(0.3)
    pacer = make_pacer(pair, DecodeConfig(adaptive=True), "tree")
    assert pacer.shapes == SHAPES and pacer.costs == RoundCosts({1: 40.0, 7: 58.0}, 12.0, 2.0, draft_row=2.0)
    assert make_pacer(pair, DecodeConfig(adaptive=True), "model").shapes == ()
    assert candidates(DecodeConfig(tree_width=2, tree_nodes=10)) == ((2, 8), (2, 10))
    assert candidates(DecodeConfig(tree_width=1)) == ()
    # the run records the largest shape it may choose, which gives back the same shapes
    gen = start(pair, "w1 w2", DecodeConfig(adaptive=True, tree_nodes=12, max_new_tokens=4), "tree", chat=False)
    assert (gen.cfg.tree_width, gen.cfg.tree_nodes) == (3, 12) and "Adaptive K" in gen.tree_shape
    assert gen.pacer.shapes == candidates(gen.cfg) == ((2, 8), (2, 12), (3, 8), (3, 12))


def test_adaptive_needs_the_lean_forward_to_time_its_costs():
    pair = _tiny_pair(0.6)  # transformers' models: nothing to time the costs with
    with pytest.raises(ConfigError, match="lean Qwen2") as e:
        make_pacer(pair, DecodeConfig(adaptive=True), "model")
    assert e.value.field == "adaptive"


def _lean_pair(noise: float):
    hf = tiny.model(0, scale=4)
    return tiny.pair(tiny.lean(hf), tiny.lean(tiny.noisy_copy(hf, 1, noise), batch_invariant=False))


def _paced_tree_run(noise: float, n: int = 40, temperature: float = 0.0) -> tuple[Generation, Generation]:
    """A paced tree run on rows as cheap as FLAT's, and verifier-only beside it."""
    from specdec.options import SamplingConfig
    pair, ids = _lean_pair(noise), tiny.prompt_ids(8, seed=11)
    cfg = DecodeConfig(max_new_tokens=n, k=4, ignore_eos=True, adaptive=True, confidence=0.0,
                       sampling=SamplingConfig(temperature))
    # the costs as given (timed=False): the tiny models' real forwards, a millisecond, would make drafting free
    gen = Generation(pair, ids, cfg, make_drafter("tree", pair, cfg=cfg), pacer=Pacer(FLAT, cfg.k, SHAPES, timed=False)).run()
    return gen, Generation(pair, ids, cfg, make_drafter("none", pair)).run()


@pytest.mark.parametrize("noise", [0.0, 0.3, 3.0])
def test_a_paced_tree_run_is_the_verifiers_greedy_output_and_drafts_each_rounds_plan(noise):
    """Noise 3 makes an unrelated draft: the first rounds grow the prior's tree, then it drafts little or
    nothing; the better drafts grow trees and chains as their rounds teach it."""
    gen, baseline = _paced_tree_run(noise)
    assert gen.token_ids == baseline.token_ids
    for r in gen.rounds:
        assert r.drafted <= r.plan.asked
        if r.tree is not None:
            assert (r.tree.width, r.tree.budget) == (r.plan.width, r.plan.budget)
            assert max(n.depth for n in r.tree.nodes) <= r.plan.k
        else:  # a chain, with the confidence each draft had, as the chain drafter's
            assert r.plan.width == 1 and len(r.positions) <= r.plan.k
            assert all(0 < p.confidence <= 1 for p in r.positions)
    assert gen.rounds[0].plan.width > 1                                   # the prior: a tree pays on these costs
    if noise == 3.0:
        assert any(r.plan.k == 0 and r.draft_stop == DraftStop.PACED for r in gen.rounds)
    else:
        assert any(r.tree is not None and r.n_accepted for r in gen.rounds)


def test_a_paced_tree_trace_reads_back_and_a_format_7_plan_reads_as_a_chains():
    gen, _ = _paced_tree_run(3.0, n=16, temperature=0.8)
    assert {r.plan.width > 1 for r in gen.rounds} == {True, False}
    raw = TraceFile({}, tuple(gen.rounds), gen.prefill_s, gen.text, gen.stop_reason).to_json()
    assert TraceFile.from_json(raw).rounds == tuple(gen.rounds)
    data = json.loads(raw)
    data["format"] = 7
    for d in data["rounds"]:
        for name in ("width", "budget", "siblings", "branching", "trees"):
            del d["plan"][name]
    assert all(r.plan.width == 1 and r.plan.trees == () for r in TraceFile.from_json(json.dumps(data)).rounds)


def test_the_step_text_says_which_tree_a_round_drafted_and_why():
    from specdec.teach.render import draft_stop_text
    from specdec.teach.render_tree import tree_explain
    gen, _ = _paced_tree_run(0.0)
    tree = next(r for r in gen.rounds if r.tree is not None)
    said = tree_explain(tree, "draft", True, 4)
    assert f"Adaptive K chose this shape before the round: at this run's acceptance so far (first children a1 = " \
           f"{tree.plan.acceptance[0]:.2f}" in said
    assert f"second children kept {tree.plan.siblings[0][0]:.2f}" in said
    chosen = next(t for t in tree.plan.trees if (t.width, t.budget) == (tree.plan.width, tree.plan.budget))
    assert f"a tree of W = {tree.tree.width}, N = {tree.tree.budget}, 4 deep, is predicted to give " \
           f"{chosen.tokens:.2f} tokens in {chosen.ms:.0f} ms" in said
    chain = next(r for r in gen.rounds if r.tree is None and r.plan.k)
    assert "and any tree weighed (the best tree, W = " in draft_stop_text(chain, 4, 0.0)


def _paced_run(noise: float, n: int = 40):
    pair, prompt = _tiny_pair(noise), tiny.prompt_ids(seed=3)
    cfg = DecodeConfig(max_new_tokens=n, k=5, adaptive=True, confidence=0.0)
    return Generation(pair, prompt, cfg, make_drafter("model", pair), pacer=Pacer(CPU, cfg.k, timed=False)).run()


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
