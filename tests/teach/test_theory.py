"""The numbers the app, the notebooks and the benchmarks report, defined and checked by hand: the
counts of a run (drafted, tested, kept, a), the theory's expected tokens per round, the rule's
histogram beside the argmax-draft bug, the one cost fit, the one noise bound and the cost model."""
from __future__ import annotations

import pytest
import torch
from helpers.scripted import count_definitions_run

from specdec.teach.experiment import histogram
from specdec.teach.theory import acceptance, tokens_per_round, tokens_per_round_drafted
from specdec.trace import (
    ACCEPTED,
    AFTER_STOP,
    BONUS,
    REJECTED,
    UNREACHED,
    Candidate,
    DraftPosition,
    summarize,
)

# ---- the numbers of a run, defined on a scripted one ------------------------------------------

def test_count_definitions_on_a_scripted_run():
    """The numbers of a run, defined on the scripted run of :func:`helpers.scripted.count_definitions_run`."""
    gen = count_definitions_run()
    r1, r2, r3 = gen.rounds
    assert [p.status for p in r1.positions] == [ACCEPTED, ACCEPTED, REJECTED, UNREACHED]
    assert [p.status for p in r2.positions] == [ACCEPTED] * 4 and r2.next_kind == BONUS
    assert [p.status for p in r3.positions] == [ACCEPTED, ACCEPTED, AFTER_STOP, AFTER_STOP]
    assert (r1.drafted, r1.tested, r2.tested, r3.drafted, r3.tested) == (4, 3, 4, 2, 2)
    s = summarize(gen.rounds, gen.prefill_s)
    assert (s.accepted, s.drafted, s.new_tokens, s.rounds, s.target_forwards) == (8, 10, 10, 3, 4)
    assert acceptance(gen.rounds) == pytest.approx(8 / 9)  # kept / tested: the untested one does not count
    # a_i = P(position i kept | position i reached and drafted), as the summary, notebook 03 and the sweep give it:
    # positions 1 and 2 reached in all three rounds and kept; position 3 reached in rounds 1 (rejected) and 2
    # (kept); position 4 only in round 2 (round 1's was after the rejection, round 3's after the stop token)
    assert s.per_position_acceptance == (1.0, 1.0, 0.5, 1.0)
    # round 3 ended at its kept stop token and drew nothing: 10 tokens are 8 kept + 2 drawn, not 8 + 3 rounds
    assert r3.next_kind is None and s.new_tokens == s.accepted + sum(r.next_kind is not None for r in gen.rounds)
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
    assert (m.verify_fixed, m.verify_per_row) == pytest.approx((0.0875, 0.0125))  # the line through (1, 100), (5, 150) ms
    assert m.v(4) == pytest.approx(1.5) and m.a == pytest.approx(6 / 7) and m.k_mean == 4
    # t1 is the verifier-only step as measured; the line passes through it (its L = 1 points): v(0) = 1
    assert m.v(0) == pytest.approx(1.0)
    assert m.measured == pytest.approx((8 / 0.38) / 10.0)
    assert m.speedup(4) == pytest.approx(tokens_per_round(6 / 7, 4) / (4 * 0.1 + 1.5))
    assert m.speedup(4, a=0.5) == pytest.approx(tokens_per_round(0.5, 4) / (4 * 0.1 + 1.5))  # another a, same costs
    assert m.best_k(8, a=0.0) == 1 and m.best_k(8) == max(range(1, 9), key=m.speedup)
    assert cost_model(base, [rnd(0.0, 0.1)]) is None                           # nothing drafted: no model
