"""The suffix tree drafter (specdec.decode.suffix): its match, its tree, its pool, and the rule it relies
on (every node one-hot at its own token), lossless at T = 0 and T > 0 on tiny random models."""
import pytest
import torch
from helpers import tiny

from specdec import DecodeConfig, Generation, SamplingConfig, make_drafter
from specdec.decode import rule
from specdec.decode.rule import verify_tree
from specdec.decode.sampling import draw
from specdec.decode.suffix import Document, SuffixDrafter, SuffixPool, session_pool, tree_of
from specdec.teach.experiment import tv_distance as tv
from specdec.teach.experiment import tv_noise_bound as noise_bound
from helpers.tiny import exact_marginals as _exact_marginals

pytestmark = pytest.mark.usefixtures("one_thread")

GREEDY = SamplingConfig(0.0)


# ---- the tree: shares, budget, width, order --------------------------------------------------

def test_the_tree_keeps_the_most_frequent_branches_depth_first():
    # 5 occurrences: 7 8 9 (x3), 7 5 (x1), 4 (x1)
    conts = [(7, 8, 9), (7, 8, 9), (7, 5), (7, 8, 9), (4,)]
    parents, tokens, shares = tree_of(conts, k=3, budget=10, width=3)
    # depth-first, children by count: 7 (4/5), 8 (3/5), 9 (3/5), 5 (1/5), then 4 (1/5)
    assert tokens == [7, 8, 9, 5, 4] and parents == [0, 1, 2, 1, 0]
    assert shares == [0.8, 0.6, 0.6, 0.2, 0.2]
    # the budget keeps the highest shares (the shallower first on a tie), parents always in
    parents, tokens, _ = tree_of(conts, k=3, budget=3, width=3)
    assert tokens == [7, 8, 9] and parents == [0, 1, 2]
    # width 1: the most frequent continuation only; k cuts the depth
    assert tree_of(conts, k=2, budget=10, width=1)[1] == [7, 8]


def test_branches_below_the_minimum_share_are_not_proposed():
    conts = [(1, 2)] * 19 + [(3, 4)]  # 3 follows 1 of 20 occurrences: 5 % < 10 %
    parents, tokens, shares = tree_of(conts, k=2, budget=10, width=3)
    assert tokens == [1, 2] and parents == [0, 1]


# ---- the match: longest, visible only, the pool, a repeat ----------------------------------

def _drafter(context, hidden=(), pool=None, nodes=12):
    d = SuffixDrafter(50, hidden, pool, nodes=nodes)
    d.doc.extend(context, hidden)
    return d


def test_the_longest_earlier_tail_is_matched_and_its_continuations_copied():
    ctx = [1, 2, 3, 4, 9, 9, 7, 3, 4, 5, 6, 0, 2, 3, 4]  # tail "2 3 4" once before, "3 4" twice
    m = _drafter(ctx).match(k=3)
    assert m.length == 3 and m.continuations == ((9, 9, 7),)  # the longer match only
    m = _drafter(ctx[:-3] + [8, 3, 4]).match(k=3)  # tail "8 3 4": "3 4" twice before
    assert m.length == 2 and sorted(m.continuations) == [(5, 6, 0), (9, 9, 7)]


def test_hidden_positions_are_neither_matched_nor_copied():
    ctx = [1, 2, 3, 7, 8, 1, 2, 3]
    hidden = (False, False, False, True, False)  # the 7 after the first "1 2 3" is the template's
    assert _drafter(ctx, hidden).match(k=3).continuations == ()
    assert _drafter(ctx).match(k=3).continuations == ((7, 8, 1),)


def test_an_occurrence_overlapping_the_tail_continues_with_its_own_copy():
    ctx = [5, 1, 2, 1, 2, 1, 2]  # the period "1 2": the latest occurrence ends one period back
    m = _drafter(ctx).match(k=5)
    assert m.length == 4 and m.continuations == ((1, 2, 1, 2, 1),)  # "1 2 1 2" ends at index 4


def test_the_pool_lets_a_run_copy_what_an_earlier_run_wrote():
    pool = SuffixPool()
    first = SuffixDrafter(50, (), pool)
    first.doc.extend([10, 11, 12, 13, 14, 15])
    second = SuffixDrafter(50, (), pool)
    second.doc.extend([3, 11, 12])
    assert second.match(k=3).continuations == ((13, 14, 15),)
    assert SuffixDrafter(50, (), None).match(k=3).continuations == ()  # without a pool: nothing to read
    # the pool forgets its oldest runs past its size, never the newest
    small = SuffixPool(max_tokens=5)
    for n in (4, 4, 4):
        doc = Document()
        doc.extend(list(range(n)))
        small.add(doc)
    assert len(small.documents) == 1 and small.tokens == 4


# ---- the rule with one-hot nodes -------------------------------------------------------------

V = 6
P_ROOT = torch.tensor([0.30, 0.05, 0.25, 0.10, 0.20, 0.10])
P_NEXT = torch.stack([torch.tensor([0.4, 0.1, 0.2, 0.1, 0.1, 0.1]).roll(x) for x in range(V)])  # (V, V)
PARENTS = [-1, 0, 0, 0, 1, 1]       # root -> 1, 2, 3; node 1 -> 4, 5
TOKENS = [0, 2, 4, 1, 3, 0]          # fixed: a deterministic drafter's tree


def _one_hot_round(B, g, planted=False):
    tokens = torch.tensor(TOKENS).expand(B, -1)
    p = torch.stack([P_ROOT, P_NEXT[2], P_NEXT[4], P_NEXT[1], P_NEXT[3], P_NEXT[0]])[None].expand(B, -1, -1)
    # what a careless drafter would hand over: its branches' shares as q (the rule must not read them)
    q = torch.zeros(B, len(PARENTS), V)
    q[:, 0, [2, 4, 1]] = torch.tensor([0.5, 0.3, 0.2])
    q[:, 1, [3, 0]] = torch.tensor([0.6, 0.4])
    v = verify_tree(PARENTS, tokens, q, p, g, one_hot_nodes=not planted)
    on_path = tokens[torch.arange(B)[:, None], v.path.clamp_min(0)]
    n = v.n_accepted
    y1 = torch.where(n >= 1, on_path[:, 0], v.next_token)
    y2 = torch.where(n >= 2, on_path[:, 1], torch.where(n == 1, v.next_token, draw(P_NEXT[y1], g)))
    freq = torch.bincount(y1 * V + y2, minlength=V * V).float() / B
    return 0.5 * (freq - (P_ROOT[:, None] * P_NEXT).flatten()).abs().sum().item()


def test_a_deterministic_tree_emits_p_and_reading_its_shares_as_q_would_not():
    B = 200_000
    bound = noise_bound((P_ROOT[:, None] * P_NEXT).flatten().double(), B)
    assert _one_hot_round(B, torch.Generator().manual_seed(0)) < bound
    # the same tree verified as if its siblings had been drawn from the shares: biased, and caught
    assert _one_hot_round(B, torch.Generator().manual_seed(0), planted=True) > 3 * bound


def test_one_hot_nodes_ignore_q_and_never_break_a_contract():
    g = torch.Generator().manual_seed(3)
    p = torch.softmax(torch.randn(1, len(PARENTS), V, generator=g), -1)
    v = verify_tree(PARENTS, torch.tensor([TOKENS]), torch.zeros(1, len(PARENTS), V), p, g, one_hot_nodes=True)
    assert bool(v.contract)
    tested = v.tested[0]
    # a tested node's ratio is r(x) / 1: at the root's first child exactly p(x)
    assert float(v.ratios[0, 1]) == pytest.approx(float(p[0, 0, TOKENS[1]]))
    assert bool(tested[1])


# ---- through the engine: greedy output and marginals ---------------------------------------

@pytest.fixture
def lean_pair():
    target = tiny.model(1, scale=6)
    pair = tiny.pair(tiny.lean(target), tiny.lean(tiny.noisy_copy(target, 2, 0.5), batch_invariant=False))
    pair.stop_ids = frozenset()
    return target, pair


@pytest.mark.parametrize("drafter", ["suffix", "suffix-model"])
def test_greedy_output_is_the_verifiers_with_trees_chains_and_the_pool(lean_pair, drafter):
    _, pair = lean_pair
    session_pool(pair.target_name).clear()
    prompt = tiny.prompt_ids(9) * 3  # repeats: the first rounds copy, some as trees
    for k in (2, 5):
        cfg = DecodeConfig(max_new_tokens=30, k=k, confidence=0.0, sampling=GREEDY)
        base = Generation(pair, prompt, cfg, make_drafter("none", pair)).run()
        seen = set()
        for _ in range(2):  # the second run reads the first from the pool
            gen = Generation(pair, prompt, cfg, make_drafter(drafter, pair, cfg=cfg)).run()
            assert gen.token_ids == base.token_ids
            seen |= {r.tree is not None and len(r.tree.nodes) - 1 > max(x.depth for x in r.tree.nodes)
                     for r in gen.rounds}
        assert True in seen  # a round whose tree had siblings
    session_pool(pair.target_name).clear()


def test_the_suffix_tree_emits_the_verifier_distribution(lean_pair):
    """Deterministic trees from the prompt's repeats and the run's own output: each emitted token is still
    distributed as the verifier's exact marginal; siblings were tested after rejections."""
    target, pair = lean_pair
    sampling = SamplingConfig(0.8, top_k=20, top_p=0.95)
    base = tiny.prompt_ids(5)
    prompt, n, runs = base + [7] + base + [9] + base, 3, 600  # the tail followed by 7, then by 9: two siblings
    exact = _exact_marginals(target, prompt, sampling, n)
    counts, siblings = torch.zeros(n, tiny.V), 0
    for seed in range(runs):
        session_pool(pair.target_name).clear()  # each run sees only its own prompt and output
        cfg = DecodeConfig(max_new_tokens=n, k=2, confidence=0.0, seed=seed, sampling=sampling)
        gen = Generation(pair, prompt, cfg, make_drafter("suffix", pair, cfg=cfg)).run()
        siblings += sum(sum(x.status == "rejected" for x in r.tree.nodes) > 1 for r in gen.rounds if r.tree)
        for i, tok in enumerate(gen.token_ids):
            counts[i, tok] += 1
    assert siblings > runs / 10  # a second sibling was tested after a rejection, often
    for i in range(n):
        assert tv(counts[i] / runs, exact[i]) <= noise_bound(exact[i], runs), f"token {i}"
