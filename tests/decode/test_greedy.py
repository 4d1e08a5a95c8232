"""Temperature 0: speculative output equals verifier-only greedy, on tiny random models.

Three drafts: the verifier itself (everything accepted), an unrelated model (almost nothing
accepted) and a scripted draft that is wrong at chosen positions (partial acceptance at every
position of a round). The reference is transformers' own ``generate(do_sample=False)``.
A divergence is allowed only at a numerical near-tie of the verifier's top two logits.
"""
import pytest
import torch
from helpers import tiny
from helpers.scripted import ScriptedDrafter, hf_greedy

from specdec import DecodeConfig, Generation, make_drafter

N, K = 40, 4


def assert_same_or_near_tie(model, prompt, ours, ref, tol=1e-4):
    diff = next((i for i, (a, b) in enumerate(zip(ours, ref)) if a != b), None)
    if diff is None:
        assert len(ours) == len(ref)
        return
    with torch.inference_mode():
        logits = model(torch.tensor([prompt + ref[:diff]])).logits[0, -1, :tiny.V]
    top2 = logits.topk(2).values
    assert (top2[0] - top2[1]).item() < tol, f"diverged at {diff} without a near-tie ({top2.tolist()})"


def run(pair, prompt, drafter, k=K, n=N):
    return Generation(pair, prompt, DecodeConfig(max_new_tokens=n, k=k), drafter).run()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_draft_equal_to_verifier_accepts_everything(seed):
    target = tiny.model(seed, scale=8)
    pair = tiny.pair(target, target)
    pair.stop_ids = frozenset()
    prompt = tiny.prompt_ids(seed=seed)
    gen = run(pair, prompt, make_drafter("model", pair))
    assert_same_or_near_tie(target, prompt, gen.token_ids, hf_greedy(target, prompt, eos=None))
    assert gen.summary().acceptance_rate == 1.0
    assert all(r.n_accepted == r.drafted for r in gen.rounds)
    assert all(r.next_kind == "bonus" for r in gen.rounds)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_unrelated_draft_still_gives_verifier_greedy(seed):
    target, draft = tiny.model(seed, scale=8), tiny.model(100 + seed, scale=8)
    pair = tiny.pair(target, draft)
    prompt = tiny.prompt_ids(seed=seed)
    gen = run(pair, prompt, make_drafter("model", pair))
    assert_same_or_near_tie(target, prompt, gen.token_ids, hf_greedy(target, prompt))
    assert gen.summary().acceptance_rate < 0.3
    baseline = run(pair, prompt, make_drafter("none", pair))
    assert baseline.token_ids == hf_greedy(target, prompt)


def test_scripted_draft_gives_partial_acceptance_at_every_position():
    target = tiny.model(7, scale=8)
    pair = tiny.pair(target, None)
    pair.stop_ids = frozenset()
    prompt = tiny.prompt_ids(seed=7)
    truth = hf_greedy(target, prompt, eos=None)
    # Rounds start at output positions 0, 1, 3, 6, 10, 15, ...: a wrong token at offset j of a
    # round makes that round keep exactly j drafts, so these cover j = 0, 1, 2, 3 and K.
    wrong_at = {0, 2, 5, 9}
    gen = run(pair, prompt, ScriptedDrafter(truth, wrong_at, len(prompt), pair.vocab_size))
    assert gen.token_ids == truth
    kept = [r.n_accepted for r in gen.rounds]
    assert kept[:5] == [0, 1, 2, 3, K]
    assert all(c > 0 for c in gen.summary().accepted_histogram)
    for r in gen.rounds[:4]:  # the rejected position holds the wrong token and the verifier's fix follows
        assert r.positions[r.rejected_at].status == "rejected"
        assert r.next_kind == "resampled" and r.next_token.prob == 1.0


def test_lookup_drafter_is_exact_at_temperature_zero():
    target = tiny.model(3, scale=8)
    pair = tiny.pair(target, None)
    prompt = tiny.prompt_ids(8, seed=3) * 3  # repetition gives the lookup something to copy
    gen = run(pair, prompt, make_drafter("lookup", pair))
    assert_same_or_near_tie(target, prompt, gen.token_ids, hf_greedy(target, prompt))
    assert gen.summary().drafted > 0
