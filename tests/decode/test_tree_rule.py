"""The tree acceptance rule on hand-made distributions: recursive rejection sampling without replacement
(Jeon et al. 2024) at T > 0, SpecInfer's greedy walk at T = 0. No model, no cache, no tokenizer."""
import pytest
import torch

from specdec.decode import rule
from specdec.decode.rule import DrafterContractError, verify, verify_tree
from specdec.decode.sampling import draw
from specdec.teach.experiment import tv_noise_bound

V = 6
# root -> 1, 2, 3; 1 -> 4, 5; 2 -> 6, 7; node 3 a leaf (N = 7, depth 2, width 3)
PARENTS = [-1, 0, 0, 0, 1, 1, 2, 2]


# (B, 6) tensors: the Monte-Carlo tests ran 7x slower on two threads than on one
pytestmark = pytest.mark.usefixtures("one_thread")


def _dist(weights):
    """Weights -> probabilities along the last axis: a list gives one (V,) row, a list of lists (K, V)."""
    t = torch.tensor(weights, dtype=torch.float32)
    return t / t.sum(-1, keepdim=True)


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


# q far from p at both levels, so that among three (then two) siblings drawn without replacement some are
# kept and some rejected often, and the residual chain and the renormalisation both carry real mass.
P_ROOT = _dist([8, 1, 6, 1, 3, 1])                                  # (V,)
Q_ROOT = _dist([1, 8, 1, 6, 1, 3])                                  # (V,)
# p(. | x1) and q(. | x1): row x1 is the distribution after first-level token x1, so p depends on the path.
P_NEXT = torch.stack([_dist([9, 1, 4, 1, 1, 2]).roll(x) for x in range(V)])         # (V, V)
Q_NEXT = torch.stack([_dist([1, 6, 1, 1, 5, 2]).roll(2 * x) for x in range(V)])     # (V, V)
P_LEAF = torch.full((V,), 1 / V)                                    # after two tokens: only the bonus reads it


def _tree_round(B, g):
    """B trials of one drafted tree: the siblings drawn without replacement from q, per trial."""
    first = torch.multinomial(Q_ROOT.expand(B, V).contiguous(), 3, replacement=False, generator=g)  # (B, 3)
    a, b, c = first.unbind(1)                                        # (B,) tokens of nodes 1, 2, 3
    below_a = torch.multinomial(Q_NEXT[a], 2, replacement=False, generator=g)          # (B, 2) nodes 4, 5
    below_b = torch.multinomial(Q_NEXT[b], 2, replacement=False, generator=g)          # (B, 2) nodes 6, 7
    tokens = torch.cat([torch.zeros(B, 1, dtype=torch.long), first, below_a, below_b], 1)  # (B, N+1)
    none, leaf = torch.zeros(B, V), P_LEAF.expand(B, V)
    # rows of leaves (3..7) are never read for q; the rule must not need them
    q = torch.stack([Q_ROOT.expand(B, V), Q_NEXT[a], Q_NEXT[b], none, none, none, none, none], 1)  # (B, N+1, V)
    p = torch.stack([P_ROOT.expand(B, V), P_NEXT[a], P_NEXT[b], P_NEXT[c], leaf, leaf, leaf, leaf], 1)
    return tokens, q, p


def _pair_tv(B, seed=0):
    """TV between the emitted (first, second) token pair and p_root(y1) p(y2 | y1)."""
    g = _gen(seed)
    tokens, q, p = _tree_round(B, g)
    v = verify_tree(PARENTS, tokens, q, p, g)
    rows, n = torch.arange(B), v.n_accepted
    on_path = tokens[rows[:, None], v.path.clamp_min(0)]             # (B, D)
    y1 = torch.where(n >= 1, on_path[:, 0], v.next_token)
    # A round that stops at the root emits one token; the next round's first token comes from the verifier's
    # p after y1, which is what drawing from P_NEXT[y1] stands for.
    y2 = torch.where(n >= 2, on_path[:, 1], torch.where(n == 1, v.next_token, draw(P_NEXT[y1], g)))
    freq = torch.bincount(y1 * V + y2, minlength=V * V).float() / B  # (V*V,)
    joint = (P_ROOT[:, None] * P_NEXT).flatten()                      # (V*V,)
    return 0.5 * (freq - joint).abs().sum().item()


# The project's one bound (docs/notation.md, specdec.teach.experiment.tv_noise_bound) over the 36 cells of the
# pair's joint distribution: about four times the total variation a correct rule's histogram of B_MC draws
# strays by noise alone (0.016 here, against 0.005 expected); each classic mistake below misses by over 3x it.
B_MC = 200_000
TV_BOUND = tv_noise_bound((P_ROOT[:, None] * P_NEXT).flatten().double(), B_MC)


def test_tree_rule_is_lossless():
    tv = _pair_tv(B_MC)
    assert tv < TV_BOUND, tv


@pytest.mark.parametrize("helper, mistake", [
    ("_residual", lambda r, q_i: r),                                  # residual not updated between siblings
    # Zeroing without renormalising is exactly SpecInfer's q (nothing removed) used for draws made without
    # replacement: r already vanishes on every rejected token, so the residuals are the same either way.
    ("_without", lambda q, removed: q.masked_fill(removed, 0.0)),
    ("_residual", lambda r, q_i: (r - q_i).clamp_min(0)),             # residual not renormalised
], ids=["residual-kept", "q-not-renormalised", "residual-not-renormalised"])
def test_classic_mistakes_fail_the_losslessness_check(monkeypatch, helper, mistake):
    monkeypatch.setattr(rule, helper, mistake)
    tv = _pair_tv(B_MC)
    assert tv > 3 * TV_BOUND, f"TV {tv}: the Monte-Carlo check would not catch this mistake"


def _greedy_p(parents, tokens, next_of):
    """One-hot p per node: the verifier's greedy choice after that node's path, ``next_of[path]``."""
    paths = [()]
    for i in range(1, len(parents)):
        paths.append(paths[parents[i]] + (tokens[i],))
    return torch.eye(V)[[next_of.get(path, 5) for path in paths]]   # (N+1, V)


@pytest.mark.parametrize("next_of, path, nxt", [
    ({(): 2, (2,): 4, (2, 4): 0}, [2, 7], 0),   # second child, then its second child, a leaf: the bonus
    ({(): 1, (1,): 0, (1, 0): 3}, [1, 5], 3),   # first child, then its second child
    ({(): 0}, [-1, -1], 0),                     # no child matches at the root
    ({(): 1, (1,): 3}, [1, -1], 3),             # a match at depth 1, none below it
    ({(): 3, (3,): 2}, [3, -1], 2),             # a match at a leaf of depth 1: the bonus from its p
])
def test_temperature_zero_is_the_verifiers_greedy_walk(next_of, path, nxt):
    tokens = [0, 1, 2, 3, 4, 0, 5, 4]
    p = _greedy_p(PARENTS, tokens, next_of)[None]                    # (1, N+1, V)
    g = _gen(7)
    state = g.get_state()
    verdicts = [verify_tree(PARENTS, torch.tensor([tokens]), q, p, g, greedy=True)
                for q in (torch.zeros(1, 8, V), torch.rand(1, 8, V, generator=_gen(1)))]
    assert torch.equal(g.get_state(), state)                         # no randomness consumed
    for v in verdicts:                                               # q is ignored, even an all-zero one
        assert v.path[0].tolist() == path and int(v.next_token[0]) == nxt
        n = int(v.n_accepted[0])
        assert int(v.last[0]) == ([0] + path)[n]
        # the emitted tokens are the verifier's own greedy sequence, as far as the tree reaches
        greedy_seq = [next_of[()]]
        while tuple(greedy_seq) in next_of:
            greedy_seq.append(next_of[tuple(greedy_seq)])
        assert [tokens[j] for j in path[:n]] + [nxt] == greedy_seq[:n + 1]
        # tested: at each node of the walk its children in order, up to the one stepped to (or all of them)
        expect = []
        for d, node in enumerate([0] + path[:n]):
            kids = [i for i in range(1, len(PARENTS)) if PARENTS[i] == node]
            expect += kids[:kids.index(path[d]) + 1] if d < n else kids
        assert v.tested[0].nonzero().squeeze(-1).tolist() == sorted(expect)
        assert bool(torch.isnan(v.uniforms).all())
        tested = v.tested[0]
        assert set(v.ratios[0, tested].tolist()) <= {0.0, 1.0}
        assert torch.equal(v.ratios[0, tested] == 1.0, v.accepted[0, tested])


@pytest.mark.parametrize("greedy", [False, True], ids=["T>0", "T=0"])
def test_a_chain_is_verify_bit_for_bit(greedy):
    """Each node one child: the tree of width 1 is ``verify``'s rule, with the same draws from the same
    generator in the same order, so the engine's one round (``verify_tree``) leaves a chain's trace as it was."""
    B, K = 4_000, 4
    g = _gen(3)
    p = torch.rand(B, K + 1, V, generator=g) ** 4                   # (B, K+1, V) random, far from uniform
    q = torch.rand(B, K, V, generator=g) ** 4                       # (B, K, V)
    p, q = p / p.sum(-1, keepdim=True), q / q.sum(-1, keepdim=True)
    q = 0.6 * p[:, :K] + 0.4 * q                                    # close enough to p that chains run deep
    drafts = torch.multinomial(q.reshape(B * K, V), 1, generator=g).reshape(B, K)  # (B, K) drawn from q
    tokens = torch.cat([torch.zeros(B, 1, dtype=torch.long), drafts], 1)            # (B, K+1)
    q_tree = torch.cat([q, torch.zeros(B, 1, V)], 1)                                 # (B, K+1, V) a leaf last
    g_flat, g_tree = _gen(11), _gen(11)
    flat = verify(drafts, q, p, g_flat, greedy=greedy)
    chain = verify_tree([-1, 0, 1, 2, 3], tokens, q_tree, p, g_tree, greedy=greedy, keep_residuals=True)
    assert torch.equal(g_flat.get_state(), g_tree.get_state())     # the same draws, in the same order
    assert torch.equal(chain.n_accepted, flat.n_accepted) and torch.equal(chain.last, flat.n_accepted)
    assert torch.equal(chain.next_token, flat.next_token) and torch.equal(chain.next_dist, flat.next_dist)
    tested = chain.tested[:, 1:]
    assert torch.equal(tested, torch.arange(K) <= flat.n_accepted[:, None])
    assert torch.equal(chain.ratios[:, 1:][tested], flat.ratios[tested])
    assert torch.equal(chain.uniforms[:, 1:][tested], flat.uniforms[tested])
    assert bool(chain.ratios[:, 1:][~tested].isnan().all()) and bool(chain.contract)
    n = chain.n_accepted
    assert torch.equal(chain.path, torch.where(torch.arange(1, K + 1) <= n[:, None], torch.arange(1, K + 1), -1))
    assert (n == K).float().mean() > 0.05 and (n == 0).float().mean() > 0.05  # bonus and early rejections both seen
    rejected = (n < K).nonzero().squeeze(-1)
    expect = torch.zeros(B, K + 1, V)
    if not greedy:  # the residual after the rejected node is the one the final token was drawn from
        expect[rejected, n[rejected] + 1] = flat.next_dist[rejected]
    assert torch.equal(chain.residuals, expect)


def test_a_chain_keeps_the_chains_contract_check():
    q = torch.full((1, 2, V), 1 / V)
    q[0, 0, 3] = 0.0
    tokens, p = torch.tensor([[0, 3, 1]]), torch.full((1, 3, V), 1 / V)
    with pytest.raises(DrafterContractError, match=r"drafted token 3 at position 0 has q\(x\) = 0.0"):
        verify_tree([-1, 0, 1], tokens, torch.cat([q, torch.zeros(1, 1, V)], 1), p, _gen())
    v = verify_tree([-1, 0, 1], tokens, torch.cat([q, torch.zeros(1, 1, V)], 1), p, _gen(), check=False)
    assert not bool(v.contract)                                      # left to the caller, read with the verdict
    with pytest.raises(DrafterContractError, match="drafted token 3 at position 0"):
        rule.check_tree_contract([-1, 0, 1], tokens, torch.cat([q, torch.zeros(1, 1, V)], 1))


def test_shapes_parents_and_the_drafter_contract_are_checked():
    t, q, p = torch.zeros(1, 3, dtype=torch.long), torch.full((1, 3, V), 1 / V), torch.full((1, 3, V), 1 / V)
    for parents, match in [([0, 0, 0], r"parents\[0\] must be -1"), ([-1, 0, 2], r"parents\[2\] = 2"),
                           ([-1, 0, -1], r"parents\[2\] = -1"), ([-1, 0], "tokens must be")]:
        with pytest.raises(ValueError, match=match):
            verify_tree(parents, t, q, p, _gen())
    with pytest.raises(ValueError, match="p must be"):
        verify_tree([-1, 0, 0], t, q, p[:, :2], _gen())
    with pytest.raises(ValueError, match="q must be"):
        verify_tree([-1, 0, 0], t, q[..., :4], p, _gen())
    # A duplicate sibling has q_i(x) = 0 once the first is removed: refused even where p keeps the first
    # one always (p one-hot on it), so that the verdict never depends on the draws.
    p_two = torch.eye(V)[[2, 0, 0]][None]
    with pytest.raises(DrafterContractError, match="node 2 drafted token 2"):
        verify_tree([-1, 0, 0], torch.tensor([[0, 2, 2]]), q, p_two, _gen())
    q_zero = q.clone()
    q_zero[0, 1, 4] = 0.0
    with pytest.raises(DrafterContractError, match="node 2 drafted token 4"):   # q(x) = 0 under node 1
        verify_tree([-1, 0, 1, 0], torch.tensor([[0, 3, 4, 5]]), torch.cat([q_zero, q[:, :1]], 1),
                    torch.cat([p, p[:, :1]], 1), _gen())
    v = verify_tree([-1, 0, 0], torch.tensor([[0, 2, 2]]), q, p_two, _gen(), check=False)
    assert not bool(v.contract)                                      # left to the caller, read with the verdict
    with pytest.raises(DrafterContractError, match="node 2 drafted token 2"):
        rule.check_tree_contract([-1, 0, 0], torch.tensor([[0, 2, 2]]), q)


def test_residuals_chain_through_rejected_siblings():
    # Tokens 2 and 3 have p = 0 at the root, so both children are always rejected.
    B = 1_000
    p = _dist([[5, 5, 0, 0], [1, 1, 1, 1], [1, 1, 1, 1]])[None].expand(B, 3, 4)      # (B, N+1, V)
    q = _dist([[1, 2, 3, 4], [1, 1, 1, 1], [1, 1, 1, 1]])[None].expand(B, 3, 4)
    v = verify_tree([-1, 0, 0], torch.tensor([[0, 2, 3]]).expand(B, 3), q, p, _gen(), keep_residuals=True)
    # r1 = norm(max(0, p - q)) = norm(.4, .3, 0, 0); q_2 = q without token 2 = (1, 2, 0, 4) / 7;
    # r2 = norm(max(0, r1 - q_2)) = norm(3/7, 1/7, 0, 0)
    r1, r2 = _dist([4, 3, 0, 0]), _dist([3, 1, 0, 0])
    assert torch.allclose(v.residuals[:, 1], r1.expand(B, 4)) and torch.allclose(v.residuals[:, 2], r2.expand(B, 4))
    assert bool((v.residuals[:, 0] == 0).all()) and torch.allclose(v.next_dist, r2.expand(B, 4))
    assert bool(v.tested[:, 1:].all()) and int(v.n_accepted.sum()) == 0 and set(v.next_token.tolist()) == {0, 1}
    assert torch.allclose(v.ratios[:, 1:], torch.zeros(B, 2))
    assert verify_tree([-1, 0, 0], torch.tensor([[0, 2, 3]]), q[:1], p[:1], _gen()).residuals is None
    # a residual with no mass by rounding (r == q_i) falls back to the residual before it, never to NaN
    assert torch.equal(rule._residual(r1[None], r1[None]), r1[None])
