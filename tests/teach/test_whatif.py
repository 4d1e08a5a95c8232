"""The what-if for other hardware (specdec.teach.whatif): the roofline with a cost per layer, E(K) from
per-position acceptance, S(K), and this machine's prediction from its timed costs, checked by hand."""
import pytest
from helpers import tiny

from specdec.decode.pacing import RoundCosts
from specdec.teach.whatif import (
    MACHINES,
    Machine,
    ModelSize,
    agreement,
    expected_tokens,
    forward_ms,
    model_size,
    per_position,
    position_counts,
    predict,
    predict_here,
    predict_run_here,
)
from specdec.trace import summarize

GPU = Machine("test", bandwidth_gb_s=100, tmac_s=1, layer_ms=0.5, source="made up")
BIG = ModelSize(weights=10**9, nbytes=5 * 10**8, layers=4)   # 5 ms to read at 100 GB/s; 1 ms per row at 1 T/s
SMALL = ModelSize(weights=10**8, nbytes=10**8, layers=2)


def test_forward_is_the_roofline_plus_a_cost_per_layer():
    assert forward_ms(GPU, BIG, 1) == pytest.approx(4 * 0.5 + 5)      # memory-bound: bytes / B
    assert forward_ms(GPU, BIG, 5) == pytest.approx(2 + 5)            # 5 rows: 5 ms of compute, still the bytes
    assert forward_ms(GPU, BIG, 8) == pytest.approx(2 + 8)            # 8 rows: compute-bound, L·W / R
    assert forward_ms(GPU, SMALL, 1) == pytest.approx(1 + 1)


def test_expected_tokens_from_per_position_acceptance():
    assert expected_tokens((), 4) == 1.0
    assert expected_tokens((0.5,), 2) == pytest.approx(1 + 0.5 + 0.25)   # past the measured: the last one
    assert expected_tokens((1.0, 0.5, 0.0), 3) == pytest.approx(1 + 1 + 0.5)
    assert expected_tokens((0.8,) * 6, 6) == pytest.approx((1 - 0.8 ** 7) / 0.2)  # i.i.d.: Leviathan's E(a, K)


def test_speedup_on_a_machine_by_hand():
    p = predict(GPU, BIG, SMALL, (0.5,), 2)
    step, c, v = 7.0, 2.0 / 7, 7.0 / 7  # t_v(3) = 2 + max(5, 3) = 7: three rows still read-bound
    assert (p.step_ms, p.c, p.v) == pytest.approx((step, c, v))
    assert p.tokens == pytest.approx(1.75) and p.speedup == pytest.approx(1.75 / (2 * c + v))
    # the cost per layer is what makes c the ratio of layers rather than of bytes
    slow = predict(Machine("slow calls", 100, 1, 50.0, ""), BIG, SMALL, (0.5,), 2)
    assert slow.c == pytest.approx(101 / 205) and slow.speedup < p.speedup  # not a clock assert: made-up costs


def test_the_shipped_machines_say_where_their_numbers_come_from():
    assert len({m.name for m in MACHINES}) == len(MACHINES)
    assert all(m.source and m.bandwidth_gb_s > 0 and m.tmac_s > 0 and m.layer_ms >= 0 for m in MACHINES)


COSTS = RoundCosts(verify={1: 40.0, 7: 112.0}, draft=14.0, rest=3.0, rest_per_draft=3.0)


def test_this_machine_from_its_timed_costs():
    p = predict_here(COSTS, (0.9,), 6)
    step = 43.0
    assert p.step_ms == step and p.c == pytest.approx(14 / step) and p.v == pytest.approx((112 + 3 + 18) / step)
    assert p.speedup == pytest.approx(p.tokens / (6 * 14 / step + (133 / step)))
    # a run: 3 drafted and 3.5 tokens a round on average; t(4) = 40 + 3 * 12 = 76 ms
    assert predict_run_here(COSTS, 3.0, 3.5) == pytest.approx(3.5 / ((3 * 14 + 76 + 3 + 9) / step))
    assert predict_run_here(COSTS, 3.0, 3.5, draft_forwards=False) == pytest.approx(3.5 / ((76 + 12) / step))


def test_agreement_in_words():
    assert agreement(1.10, 1.0).startswith("within 15%") and "+10%" in agreement(1.10, 1.0)
    assert agreement(0.80, 1.0).startswith("NOT within 15%") and "-20%" in agreement(0.80, 1.0)


def test_model_size_and_per_position_on_a_tiny_pair():
    target = tiny.model(1, scale=6)
    lean = tiny.lean(target)
    size = model_size(lean)
    linears = [m for m in lean.modules() if hasattr(m, "in_features") and not list(m.children())]
    assert size.layers == len(lean.layers) and size.weights == sum(m.in_features * m.out_features for m in linears)
    assert size.nbytes > 0
    from specdec import DecodeConfig
    from specdec.decode.start import start
    pair = tiny.pair(lean, tiny.lean(tiny.noisy_copy(target, 2, 0.5), batch_invariant=False))
    gen = start(pair, "w1 w2 w3", DecodeConfig(max_new_tokens=24, k=3, confidence=0.0, ignore_eos=True), "model",
                chat=False)
    gen.run()
    counts = position_counts(list(gen.rounds))
    s = summarize(gen.rounds, 0.0)
    assert [k for k, _ in counts] == [round(a * t) for a, (_, t) in zip(s.per_position_acceptance, counts)]
    assert sum(t for _, t in counts) == sum(r.tested for r in gen.rounds)
    assert per_position(counts, min_tested=1) == tuple(k / t for k, t in counts if t)


def test_per_position_pools_the_positions_tested_too_few_times():
    assert per_position(((8, 10), (6, 8), (2, 4), (1, 1))) == (0.8, 0.75, 0.6)  # 4 and 1 tests: pooled, 3 of 5
    assert per_position(((1, 2),)) == (0.5,)                                  # too few from the first: all pooled
    assert per_position(((0, 0),)) == () and per_position(((9, 9), (0, 0), (5, 5))) == (1.0, 1.0)
