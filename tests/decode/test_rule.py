"""The pure accept/reject rule on hand-made distributions (no model, no cache, no tokenizer)."""
import subprocess
import sys

import pytest
import torch

from specdec.decode.rule import DrafterContractError, verify

B, K, V = 100_000, 3, 6


def _dist(*rows):
    return torch.tensor(rows, dtype=torch.float32)


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


def test_q_equal_p_accepts_everything_and_takes_the_bonus():
    p = torch.softmax(torch.randn(K + 1, V, generator=_gen(1)), -1)
    q = p[:K].clone()
    drafts = torch.multinomial(q, B, replacement=True, generator=_gen(2)).T  # (B, K)
    v = verify(drafts, q.expand(B, K, V), p.expand(B, K + 1, V), _gen(3))
    assert bool((v.n_accepted == K).all())
    assert torch.allclose(v.next_dist[0], p[K])  # the bonus comes from p at position K+1


def test_one_hot_q_accepts_with_probability_p_of_x():
    p = _dist([0.1, 0.3, 0.6, 0, 0, 0], [1 / 6] * 6)            # (K+1, V) with K = 1
    q = torch.zeros(1, V)
    q[0, 1] = 1.0                                                  # the draft always proposes token 1
    drafts = torch.ones(B, 1, dtype=torch.long)
    v = verify(drafts, q.expand(B, 1, V), p.expand(B, 2, V), _gen())
    rate = v.n_accepted.float().mean().item()
    assert abs(rate - 0.3) < 4 * (0.3 * 0.7 / B) ** 0.5
    # rejected: resample from norm(max(0, p - q)) = p without token 1, renormalised
    rejected = v.next_token[v.n_accepted == 0]
    freq = torch.bincount(rejected, minlength=V).float() / len(rejected)
    assert torch.allclose(freq, _dist(0.1 / 0.7, 0, 0.6 / 0.7, 0, 0, 0), atol=0.01)


def test_residual_is_placed_at_the_first_rejection():
    # Position 0 always accepts (p == q); position 1 always rejects (p(x) == 0), so the
    # resample comes from norm(max(0, p_1 - q_1)) at index 1, never from position 0 or 2.
    p = _dist([0.5, 0.5, 0, 0, 0, 0], [0, 0, 0.2, 0.8, 0, 0], [0, 0, 0, 0, 0.5, 0.5])
    q = _dist([0.5, 0.5, 0, 0, 0, 0], [0, 0, 0, 0, 0, 1.0])
    drafts = torch.stack([torch.multinomial(q[0], B, replacement=True, generator=_gen(1)),
                          torch.full((B,), 5)], dim=1)              # (B, 2)
    v = verify(drafts, q.expand(B, 2, V), p.expand(B, 3, V), _gen(2))
    assert bool((v.n_accepted == 1).all())
    assert torch.allclose(v.next_dist[0], _dist(0, 0, 0.2, 0.8, 0, 0))
    assert set(v.next_token.tolist()) == {2, 3}
    assert v.ratios[0, 1].item() == 0.0


def test_temperature_zero_is_exact_argmax():
    # one-hot p and q, as the greedy path produces: accept iff the argmaxes agree, then argmax p
    p = torch.eye(V)[[2, 4, 1, 3]]                               # (K+1, V)
    for drafts, n, nxt in [([2, 4, 1], 3, 3), ([2, 0, 1], 1, 4), ([5, 4, 1], 0, 2)]:
        q = torch.eye(V)[drafts]
        for seed in range(20):  # no draw u in (0, 1] can flip a verdict when p/q is 0 or 1
            v = verify(torch.tensor([drafts]), q[None], p[None], _gen(seed), greedy=True)
            assert (int(v.n_accepted[0]), int(v.next_token[0])) == (n, nxt)


def test_shapes_and_the_drafter_contract_are_checked():
    p = torch.full((1, 3, V), 1 / V)
    with pytest.raises(ValueError, match="p must be"):
        verify(torch.zeros(1, 3, dtype=torch.long), torch.full((1, 3, V), 1 / V), p, _gen())
    q = torch.zeros(1, 2, V)
    q[..., 1] = 1.0
    with pytest.raises(DrafterContractError, match=r"q\(x\) = 0.0"):  # drafted 0 but q put its mass on 1
        verify(torch.zeros(1, 2, dtype=torch.long), q, p, _gen())


def test_the_drafter_contract_holds_under_python_O():
    """Not an assert: with ``python -O`` a q(x) = 0 draft must still be refused, never accepted as p/0 = inf."""
    code = ("import torch; from specdec.decode.rule import verify, DrafterContractError\n"
            "q = torch.zeros(1, 1, 4); q[..., 1] = 1.0; p = torch.full((1, 2, 4), 0.25)\n"
            "try:\n    verify(torch.zeros(1, 1, dtype=torch.long), q, p, torch.Generator())\n"
            "except DrafterContractError:\n    print('refused')\n")
    out = subprocess.run([sys.executable, "-O", "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "refused", out.stderr[-500:]


def test_residual_is_normalised_when_q_is_not_one_hot():
    """The resample distribution is norm(max(0, p - q)) exactly, also when its mass is below 1."""
    p = _dist([0.5, 0.3, 0.2, 0, 0, 0], [1 / 6] * 6)
    q = _dist([0.1, 0.6, 0.3, 0, 0, 0])
    drafts = torch.ones(B, 1, dtype=torch.long)                        # x = 1, p/q = 0.5
    v = verify(drafts, q.expand(B, 1, V), p.expand(B, 2, V), _gen())
    rejected = v.n_accepted == 0
    residual = _dist(0.4, 0, 0, 0, 0, 0)                              # max(0, p - q), mass 0.4
    assert torch.allclose(v.next_dist[rejected][0], residual / residual.sum())
    assert torch.allclose(v.next_dist.sum(-1), torch.ones(B))
    accepted = ~rejected
    assert torch.allclose(v.next_dist[accepted][0], p[1])              # the bonus comes from p_{K+1}
    assert abs(accepted.float().mean().item() - 0.5) < 4 * (0.25 / B) ** 0.5


def test_p_and_q_are_warped_before_the_ratio():
    """The rule must see the warped (temperature, top-k, top-p) p and q: with top-k 1 every token
    but the argmax has p = 0, so a draft of another token is always rejected, whatever raw p says."""
    from specdec import SamplingConfig
    from specdec.decode.sampling import probs_from_logits
    logits = torch.tensor([[2.0, 1.9, 0, 0, 0, 0], [0, 0, 0, 3.0, 0, 0]])
    p = probs_from_logits(logits, SamplingConfig(1.0, top_k=1))        # one-hot on 0, then on 3
    q = probs_from_logits(logits[:1] + torch.tensor([0, 0.2, 0, 0, 0, 0]), SamplingConfig(1.0, top_k=2))
    assert p[0, 1] == 0 and 0 < q[0, 1] < 1                            # warped: x = 1 has no mass under p
    v = verify(torch.ones(B, 1, dtype=torch.long), q.expand(B, 1, V), p.expand(B, 2, V), _gen())
    assert bool((v.n_accepted == 0).all()) and bool((v.next_token == 0).all())
