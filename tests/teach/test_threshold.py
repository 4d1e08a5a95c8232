"""A confidence threshold replayed on a run's rounds (specdec.teach.theory.replay_threshold): by hand on
rounds whose confidences and times are set, and on a tiny-pair run against a real run at the threshold."""
from dataclasses import replace

import pytest
from helpers import tiny

from specdec import DecodeConfig
from specdec.decode.start import start
from specdec.teach.theory import confidence_points, confident_chains, replay_threshold
from specdec.trace import ACCEPTED, AFTER_STOP, REJECTED, UNREACHED, PhaseTimes

pytestmark = pytest.mark.usefixtures("one_thread")

PROMPT = "w1 w2 w3 w4 w1 w2 w3 w4 w1 w2"


@pytest.fixture(scope="module")
def pair():
    target = tiny.model(1, scale=6)
    return tiny.pair(tiny.lean(target), tiny.lean(tiny.noisy_copy(target, 2, 0.5), batch_invariant=False))


def _run(pair, k=4, confidence=0.0, n=24):
    gen = start(pair, PROMPT, DecodeConfig(max_new_tokens=n, k=k, confidence=confidence, ignore_eos=True),
                "model", chat=False)
    gen.run()
    return list(gen.rounds)


def _set(r, confidences, statuses, n_accepted, draft_ms, total_ms):
    """A round of the run re-labelled: its drafts' confidences and statuses, kept count and times."""
    pos = tuple(replace(p, confidence=c, status=s) for p, c, s in zip(r.positions, confidences, statuses))
    return replace(r, positions=pos, n_accepted=n_accepted, rejected_at=None,
                   times=PhaseTimes(draft=draft_ms / 1e3, verify=(total_ms - draft_ms) / 1e3))


def test_replay_by_hand(pair):
    r = next(r for r in _run(pair) if len(r.positions) == 4)
    a = _set(r, [0.9, 0.4, 0.95, 0.3], [ACCEPTED, ACCEPTED, REJECTED, UNREACHED], 2, 40, 100)
    b = _set(r, [0.8, 0.7, 0.2, 0.9], [ACCEPTED] * 4, 4, 40, 100)
    rounds = [a, b]
    assert confidence_points(rounds) == [(0.9, True), (0.4, True), (0.95, False),
                                         (0.8, True), (0.7, True), (0.2, True), (0.9, True)]
    at0 = replay_threshold(rounds, 0.0, row_ms=5)
    # the run itself: 4 + 4 drafted, 2 + 4 kept, 3 + 5 tokens, 100 ms each
    assert (at0.rounds, at0.drafted, at0.kept, at0.tokens, at0.ms, at0.draft_ms) == (2, 4, 3, 4, 100, 40)
    half = replay_threshold(rounds, 0.5, row_ms=5)
    # a: stops after 0.4 (2 drafted, both kept: 2 + the verifier's = 3); b: after 0.2 (3 drafted, kept, + 1 = 4)
    assert (half.drafted, half.kept, half.tokens) == (2.5, 2.5, 3.5)
    # 10 ms a drafted token (80 ms / 8); a cut 2 drafts, b 1: each saves 10 + 5 ms
    assert half.ms == pytest.approx(100 - 1.5 * 15) and half.draft_ms == pytest.approx(40 - 1.5 * 10)
    assert half.tokens_per_s == pytest.approx(1e3 * 3.5 / half.ms)
    one = replay_threshold(rounds, 1.0)  # every confidence is below 1: one draft a round
    assert (one.drafted, one.kept, one.tokens) == (1, 1, 2)


def test_a_kept_stop_token_ends_a_round_unless_it_is_cut(pair):
    r = next(r for r in _run(pair) if len(r.positions) == 4)
    s = _set(r, [0.9, 0.3, 0.9, 0.9], [ACCEPTED, ACCEPTED, AFTER_STOP, AFTER_STOP], 2, 20, 60)
    s = replace(s, next_kind=None, next_token=None)
    assert replay_threshold([s], 0.0).tokens == 2  # the run: its 2 kept drafts, the second the stop token
    assert replay_threshold([s], 0.5).tokens == 2  # stops after the 0.3 draft: the same round
    assert replay_threshold([s], 0.95).tokens == 2  # one draft, kept, and the verifier's token after it


def test_replay_at_the_runs_own_threshold_is_the_run(pair):
    rounds = _run(pair, confidence=0.5)
    chains = confident_chains(rounds)
    # a model drafter's chains carry confidences; a round with nothing drafted (the budget's end) is no chain
    assert chains == [r for r in rounds if r.drafted] and len(chains) >= len(rounds) - 1
    own = replay_threshold(rounds, 0.5)
    assert own.drafted == pytest.approx(sum(r.drafted for r in chains) / len(chains))
    assert own.tokens == pytest.approx(sum(len(r.emitted) for r in chains) / len(chains))
    assert own.ms == pytest.approx(1e3 * sum(r.times.total for r in chains) / len(chains))


def test_a_replay_counts_what_a_real_run_at_that_threshold_drafts_per_round(pair):
    """Drafted per round of a confidence-0 run replayed at 0.5 against a real run at 0.5. At T = 0 the
    drafts are the draft's greedy chain wherever a round starts, so the two agree round by round where
    they start at the same place; the replay is not the run (its rounds start elsewhere), so within a
    loose margin, and below the confidence-0 run's K."""
    full, real = _run(pair, confidence=0.0, n=48), _run(pair, confidence=0.5, n=48)
    replay = replay_threshold(full, 0.5)
    real_drafted = sum(r.drafted for r in real) / len(real)
    assert replay.drafted <= 4 and abs(replay.drafted - real_drafted) <= 1.0
    taus = [0.0, 0.3, 0.6, 0.9, 1.0]
    drafted = [replay_threshold(full, t).drafted for t in taus]
    assert drafted == sorted(drafted, reverse=True) and drafted[-1] == 1  # a higher threshold never drafts more


def test_copied_drafts_and_plain_steps_are_not_replayed(pair):
    gen = start(pair, PROMPT, DecodeConfig(max_new_tokens=16, k=3, ignore_eos=True), "lookup", chat=False)
    gen.run()
    assert confident_chains(list(gen.rounds)) == [] and replay_threshold(list(gen.rounds), 0.5) is None
