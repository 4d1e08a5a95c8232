"""Losslessness: what speculative sampling emits is distributed exactly as the verifier's p.

Single round: 200k vectorised trials of the pure rule on a toy vocabulary, with temperature,
top-k and top-p on; the histogram of each emitted position must be within ``noise_bound`` of p
(``specdec.teach.experiment.tv_noise_bound``, the project's one bound):
1.5 * sum_v sqrt(p(1-p)/M), about four times the expected total-variation noise of M samples
(<= 0.01 at position 1) and several times smaller than TV(q, p), so a wrong rule (or argmax
drafting) fails. Multi-round: the whole engine on tiny random models against the exact
verifier marginals.
"""

import pytest
import torch
from helpers import tiny
from helpers.tiny import exact_marginals as _exact_marginals

from specdec import DecodeConfig, Generation, SamplingConfig, make_drafter
from specdec.decode.rule import verify
from specdec.decode.sampling import probs_from_logits
from specdec.teach.experiment import tv_distance as tv
from specdec.teach.experiment import tv_noise_bound as noise_bound

TRIALS, K, V = 200_000, 3, 12


def hist(tokens: torch.Tensor, v: int) -> torch.Tensor:
    return torch.bincount(tokens, minlength=v).float() / len(tokens)


@pytest.mark.parametrize("sampling", [SamplingConfig(1.0), SamplingConfig(0.7, top_k=6),
                                      SamplingConfig(1.3, top_p=0.8), SamplingConfig(0.9, top_k=8, top_p=0.9)])
def test_one_round_emits_p(sampling):
    g = torch.Generator().manual_seed(0)
    target_logits = 2 * torch.randn(K + 1, V, generator=g)                   # (K+1, V)
    # a draft that is close but not equal, as a real one is, so that every position is reached
    p = probs_from_logits(target_logits, sampling)                            # (K+1, V)
    q = probs_from_logits(target_logits[:K] + torch.randn(K, V, generator=g), sampling)  # (K, V)
    assert noise_bound(p[0], TRIALS) <= 0.01
    assert tv(q[0], p[0]) > 5 * noise_bound(p[0], TRIALS)  # the test can tell the draft from the target
    drafts = torch.stack([torch.multinomial(q[i], TRIALS, replacement=True, generator=g) for i in range(K)], 1)
    v = verify(drafts, q.expand(TRIALS, K, V), p.expand(TRIALS, K + 1, V), g)
    # The token emitted at position i is the accepted draft or the resample/bonus; per-position
    # distributions do not depend on the prefix here, so each must match p_i.
    emitted = torch.where(torch.arange(K + 1) < v.n_accepted[:, None],
                          torch.cat([drafts, drafts[:, :1]], 1), v.next_token[:, None])  # (TRIALS, K+1)
    for i in range(K + 1):
        reached = v.n_accepted >= i
        n = int(reached.sum())
        assert n > 5000
        # <=: when p_i is one-hot the bound is 0 and the histogram must equal p_i exactly
        assert tv(hist(emitted[reached, i], V), p[i]) <= noise_bound(p[i], n), f"position {i} ({n} trials)"
    # acceptance at position 0 equals beta = sum min(p, q) (Leviathan et al.'s beta; their alpha = E[beta])
    beta = torch.minimum(p[0], q[0]).sum().item()
    assert abs((v.n_accepted >= 1).float().mean().item() - beta) < 0.005


def test_warpers_match_transformers_generate():
    """p and q use the same warpers, in the same order, as generate(do_sample=True)."""
    from transformers import GenerationConfig as HFConfig
    model = tiny.model(0)
    logits = 3 * torch.randn(2, 40, generator=torch.Generator().manual_seed(1))
    for t, k, top_p in [(0.7, 5, 1.0), (1.3, 0, 0.6), (0.9, 10, 0.85)]:
        hf = model._get_logits_processor(generation_config=HFConfig(do_sample=True, temperature=t, top_k=k,
                                                                     top_p=top_p), input_ids_seq_length=1)
        expected = torch.softmax(hf(torch.zeros(2, 1, dtype=torch.long), logits.clone()), -1)
        assert torch.allclose(probs_from_logits(logits, SamplingConfig(t, k, top_p)), expected)


def test_multi_round_engine_emits_the_verifier_distribution():
    """On the lean forward the real pair takes (float32; the exact marginals come from
    transformers' model of the same weights); the hybrid test below runs transformers' forward."""
    target = tiny.model(1, scale=6)
    pair = tiny.pair(tiny.lean(target), tiny.lean(tiny.noisy_copy(target, 2, 0.5), batch_invariant=False))
    pair.stop_ids = frozenset()  # EOS is an ordinary token here, so every run has n tokens
    sampling = SamplingConfig(0.8, top_k=20, top_p=0.95)
    prompt, n, runs = tiny.prompt_ids(5), 3, 1500
    exact = _exact_marginals(target, prompt, sampling, n)
    counts = torch.zeros(n, tiny.V)
    accepted = 0
    for seed in range(runs):
        cfg = DecodeConfig(max_new_tokens=n, k=2, confidence=0.0, seed=seed, sampling=sampling)
        gen = Generation(pair, prompt, cfg, make_drafter("model", pair)).run()
        accepted += gen.summary().accepted
        for i, tok in enumerate(gen.token_ids):
            counts[i, tok] += 1
    assert accepted > runs  # multi-token rounds really happened
    for i in range(n):
        assert tv(counts[i] / runs, exact[i]) <= noise_bound(exact[i], runs), f"token {i}"


def test_the_hybrid_drafter_emits_the_verifier_distribution():
    """Lookup drafts where the context's tail repeats, the model elsewhere, within one run: which
    one drafts depends on the context only, so each emitted token is still distributed as p."""
    target = tiny.model(1, scale=6)
    pair = tiny.pair(target, tiny.noisy_copy(target, 2, 0.5))
    pair.stop_ids = frozenset()
    sampling = SamplingConfig(0.8, top_k=20, top_p=0.95)
    prompt, n, runs = tiny.prompt_ids(5) * 2, 3, 500     # its tail repeats: the first round copies
    exact = _exact_marginals(target, prompt, sampling, n)
    counts, sources = torch.zeros(n, tiny.V), set()
    for seed in range(runs):
        cfg = DecodeConfig(max_new_tokens=n, k=2, confidence=0.0, seed=seed, sampling=sampling)
        gen = Generation(pair, prompt, cfg, make_drafter("hybrid", pair)).run()
        sources |= {r.drafted_by for r in gen.rounds}
        for i, tok in enumerate(gen.token_ids):
            counts[i, tok] += 1
    assert sources == {"lookup", "model"}
    for i in range(n):
        assert tv(counts[i] / runs, exact[i]) <= noise_bound(exact[i], runs), f"token {i}"


def test_fast_top_p_equals_transformers_on_a_large_vocabulary():
    """Above 4096 tokens top-p avoids the full sort; it must keep exactly the same tokens."""
    from transformers.generation.logits_process import TopPLogitsWarper
    g = torch.Generator().manual_seed(0)
    for scale, top_p in [(1.0, 0.95), (4.0, 0.9), (8.0, 0.5), (0.2, 0.95)]:  # 0.2: the slow fallback
        logits = scale * torch.randn(3, 50_000, generator=g)
        expected = TopPLogitsWarper(top_p=top_p)(torch.empty(3, 0, dtype=torch.long), logits.clone())
        got = probs_from_logits(logits, SamplingConfig(1.0, 0, top_p))
        assert torch.equal(got > 0, torch.isfinite(expected))
        assert torch.allclose(got, torch.softmax(expected, -1))


def test_inverse_cdf_draw_matches_the_distribution_and_skips_zero_mass():
    from specdec.decode.sampling import draw
    p = torch.tensor([[0.0, 0.5, 0.0, 0.3, 0.2, 0.0]])
    tokens = draw(p.expand(200_000, -1).contiguous(), torch.Generator().manual_seed(0))
    freq = torch.bincount(tokens, minlength=6).float() / len(tokens)
    assert freq[[0, 2, 5]].sum() == 0
    assert (freq - p[0]).abs().max() < 0.005


def test_the_tree_drafter_emits_the_verifier_distribution():
    """Token trees through the whole engine: siblings drawn without replacement, tested by
    recursive rejection sampling, and the caches keeping only the accepted path; each emitted
    token is still distributed as the verifier's exact marginal."""
    target = tiny.model(1, scale=6)
    draft = tiny.noisy_copy(target, 2, 0.5)
    pair = tiny.pair(tiny.lean(target), tiny.lean(draft, batch_invariant=False))
    pair.stop_ids = frozenset()
    sampling = SamplingConfig(0.8, top_k=20, top_p=0.95)
    prompt, n, runs = tiny.prompt_ids(5), 3, 800
    exact = _exact_marginals(target, prompt, sampling, n)
    counts, siblings_tested = torch.zeros(n, tiny.V), 0
    for seed in range(runs):
        cfg = DecodeConfig(max_new_tokens=n, k=2, confidence=0.0, seed=seed, sampling=sampling)
        gen = Generation(pair, prompt, cfg, make_drafter("tree", pair, tree=(3, 6), cfg=cfg)).run()
        siblings_tested += sum(sum(x.status == "rejected" for x in r.tree.nodes) > 1 for r in gen.rounds)
        for i, tok in enumerate(gen.token_ids):
            counts[i, tok] += 1
    assert siblings_tested > runs / 4  # a second sibling was tested after a rejection, often
    for i in range(n):
        assert tv(counts[i] / runs, exact[i]) <= noise_bound(exact[i], runs), f"token {i}"


def test_a_paced_tree_run_emits_the_verifier_distribution():
    """Adaptive K choosing each round's tree shape, chain or plain step from the rounds before it (costs
    given, never timed): the choice depends on the past only, so each emitted token is still distributed
    as the verifier's exact marginal, whichever shapes the seeds' runs went through."""
    from specdec.decode.pacing import Pacer, RoundCosts
    from specdec.decode.tree_shape import candidates
    target = tiny.model(1, scale=6)
    pair = tiny.pair(tiny.lean(target), tiny.lean(tiny.noisy_copy(target, 2, 0.5), batch_invariant=False))
    pair.stop_ids = frozenset()
    sampling = SamplingConfig(0.8, top_k=20, top_p=0.95)
    # rows dear enough that a round's outcome moves the choice between a tree, a chain and a plain step
    costs = RoundCosts({1: 40.0, 7: 58.0, 13: 76.0}, draft=12.0, rest=2.0, draft_row=1.0)
    prompt, n, runs = tiny.prompt_ids(5), 4, 600
    exact = _exact_marginals(target, prompt, sampling, n)
    counts, chosen = torch.zeros(n, tiny.V), set()
    for seed in range(runs):
        cfg = DecodeConfig(max_new_tokens=n, k=2, confidence=0.0, seed=seed, sampling=sampling, adaptive=True)
        gen = Generation(pair, prompt, cfg, make_drafter("tree", pair, cfg=cfg),
                         pacer=Pacer(costs, cfg.k, candidates(cfg), timed=False)).run()
        chosen |= {(r.plan.width, r.plan.asked) for r in gen.rounds[1:]}
        for i, tok in enumerate(gen.token_ids):
            counts[i, tok] += 1
    assert {w > 1 for w, _ in chosen} == {True, False} and (1, 0) in chosen  # trees, chains and plain steps
    for i in range(n):
        assert tv(counts[i] / runs, exact[i]) <= noise_bound(exact[i], runs), f"token {i}"
