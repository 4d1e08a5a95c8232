"""Token trees on tiny random models: tree attention against chains along each path, the cache
keeping only the accepted path, the tree drafter, and greedy tree output equal to the verifier's."""
import pytest
import torch
from helpers import tiny

from specdec import DecodeConfig, Generation, SamplingConfig, make_drafter
from specdec.decode.start import start
from specdec.decode.tree import (
    ancestors,
    children,
    depths,
    mask_grid,
    verifier_attention,
)
from specdec.model.lm import CachedLM

# a tree of 7 nodes under the root: depth 1 has three, depth 2 three, depth 3 one
PARENTS = (-1, 0, 0, 0, 1, 1, 2, 4)


def _tree_tokens(seed=5):
    return tiny.prompt_ids(len(PARENTS), seed=seed)


@pytest.mark.parametrize("precision", ["float32", "int8"])
def test_each_tree_node_has_the_logits_of_a_chain_along_its_path(precision):
    """Batch invariance for trees: every node's logits are those of a chain forward of its path
    (the root and its ancestors) after the same context; bitwise in int8, whose layers are
    batch-invariant (float32's matmuls sum in an order that depends on the row count)."""
    lean = tiny.lean(tiny.model(0, scale=4), precision)
    ctx = tiny.prompt_ids(30, seed=1)
    toks = _tree_tokens()
    lm = CachedLM(lean, tiny.V)
    lm.forward(ctx[:-1], keep=1)
    L = len(lm)
    tree_logits = lm.forward_tree([ctx[-1]] + toks[1:], verifier_attention(PARENTS, L))  # (N+1, V)
    for j in range(len(PARENTS)):
        chain = CachedLM(lean, tiny.V)
        chain.forward(ctx[:-1], keep=1)
        path = [ctx[-1]] + [toks[a] for a in ancestors(PARENTS, j)[1:]]
        # a verification-shaped chain forward: the root then the path, in one call
        want = chain.forward(path, keep=len(path))[-1]
        if precision == "int8":
            assert torch.equal(tree_logits[j], want), f"node {j}"
        torch.testing.assert_close(tree_logits[j], want, rtol=1e-5, atol=1e-5)


def test_the_fused_tree_mask_matches_the_exact_rows():
    """The draft's tree attention (one fused masked call) computes the same maths as the
    verifier's row-by-row one, up to rounding."""
    from dataclasses import replace
    lean = tiny.lean(tiny.model(3, scale=4))
    ctx = tiny.prompt_ids(20, seed=2)
    toks = _tree_tokens(9)
    out = []
    for exact in (True, False):
        lm = CachedLM(lean, tiny.V)
        lm.forward(ctx[:-1], keep=1)
        att = replace(verifier_attention(PARENTS, len(lm)), exact=exact)
        out.append(lm.forward_tree([ctx[-1]] + toks[1:], att))
    torch.testing.assert_close(out[0], out[1], rtol=1e-5, atol=1e-5)


def test_keeping_a_path_leaves_the_cache_of_a_chain_along_it():
    lean = tiny.lean(tiny.model(1, scale=4))
    ctx = tiny.prompt_ids(12, seed=4)
    toks = _tree_tokens(3)
    lm = CachedLM(lean, tiny.V)
    lm.forward(ctx[:-1], keep=1)
    L = len(lm)
    lm.forward_tree([ctx[-1]] + toks[1:], verifier_attention(PARENTS, L))
    path = [1, 4, 7]
    lm.keep(L + 1, [L + j for j in path])
    assert len(lm) == L + 1 + len(path)
    after = lm.forward([9], keep=1)
    fresh = CachedLM(lean, tiny.V)
    want = fresh.forward(ctx + [toks[j] for j in path] + [9], keep=1)
    torch.testing.assert_close(after, want, rtol=1e-5, atol=1e-5)


def test_tree_helpers():
    assert depths(PARENTS) == [0, 1, 1, 1, 2, 2, 2, 3]
    assert ancestors(PARENTS, 7) == [0, 1, 4, 7]
    assert children(PARENTS)[1] == [4, 5]
    grid = mask_grid(PARENTS)
    assert grid[7] == [True, True, False, False, True, False, False, True]
    assert all(grid[i][i] for i in range(len(PARENTS)))


def _lean_pair(noise=0.3, precision="float32"):
    hf = tiny.model(0, scale=4)
    return tiny.pair(tiny.lean(hf, precision), tiny.lean(tiny.noisy_copy(hf, 1, noise), precision, batch_invariant=False))


@pytest.mark.parametrize("width,nodes", [(1, 4), (2, 2), (2, 6), (3, 12), (4, 30)])
@pytest.mark.parametrize("precision", ["float32", "int8"])
def test_greedy_tree_output_is_the_verifiers_greedy_output(width, nodes, precision):
    pair = _lean_pair(precision=precision)
    cfg = DecodeConfig(max_new_tokens=40, k=4, ignore_eos=True, tree_width=width, tree_nodes=nodes)
    ids = tiny.prompt_ids(8, seed=11)
    base = Generation(pair, ids, cfg, make_drafter("none", pair)).run()
    tree = Generation(pair, ids, cfg, make_drafter("tree", pair, tree=(width, nodes))).run()
    assert tree.token_ids == base.token_ids
    assert any(r.n_accepted for r in tree.rounds)                    # the draft is good enough to be kept
    assert any(r.next_kind == "resampled" for r in tree.rounds)      # and bad enough to be corrected
    for r in tree.rounds:
        if width == 1:  # width 1 is the chain, drafted by the chain drafter
            assert r.tree is None and len(r.positions) <= cfg.k
            continue
        assert len(r.tree.nodes) - 1 <= nodes and max(n.depth for n in r.tree.nodes) <= cfg.k
        kids = children([n.parent for n in r.tree.nodes])
        assert all(len(c) <= width for c in kids)
        assert r.emitted[: r.n_accepted] == tuple(r.tree.nodes[j].token_id for j in r.tree.kept)


def test_a_wider_tree_keeps_more_tokens_per_round_than_the_chain():
    pair = _lean_pair(noise=0.6)
    ids = tiny.prompt_ids(8, seed=12)
    per_round = {}
    for width, nodes in [(1, 4), (3, 30)]:
        cfg = DecodeConfig(max_new_tokens=60, k=4, ignore_eos=True, tree_width=width, tree_nodes=nodes)
        g = Generation(pair, ids, cfg, make_drafter("tree", pair, tree=(width, nodes))).run()
        per_round[width] = g.summary().mean_tokens_per_round
    assert per_round[3] > per_round[1]


def test_sampled_tree_rounds_are_deterministic_for_a_seed_and_record_every_node():
    pair = _lean_pair()
    cfg = DecodeConfig(max_new_tokens=30, k=3, ignore_eos=True, sampling=SamplingConfig(0.8), tree_width=2,
                       tree_nodes=8, seed=3)
    ids = tiny.prompt_ids(8, seed=13)
    runs = [Generation(pair, ids, cfg, make_drafter("tree", pair, tree=(2, 8))).run() for _ in range(2)]
    assert runs[0].token_ids == runs[1].token_ids
    for r in runs[0].rounds:
        nodes = r.tree.nodes
        # children of a node are distinct (drawn without replacement) and each tested one has its draw
        kids = children([n.parent for n in nodes])
        assert all(len({nodes[c].token_id for c in cs}) == len(cs) for cs in kids)
        assert all((n.u is not None) == (n.status in ("accepted", "rejected")) for n in nodes[1:])
        assert sum(n.status == "accepted" for n in nodes) == r.n_accepted or r.next_kind is None


def test_trace_round_trips_with_its_tree():
    from specdec import TraceFile
    pair = _lean_pair()
    cfg = DecodeConfig(max_new_tokens=12, k=3, tree_width=2, tree_nodes=6, sampling=SamplingConfig(0.8))
    g = Generation(pair, tiny.prompt_ids(6), cfg, make_drafter("tree", pair, tree=(2, 6))).run()
    f = TraceFile({}, tuple(g.rounds), g.prefill_s, g.text, g.stop_reason)
    back = TraceFile.from_json(f.to_json())
    assert back.rounds == tuple(g.rounds)


def test_the_tree_drafter_refuses_models_without_the_lean_forward():
    from specdec import ConfigError
    pair = tiny.pair(tiny.model(0), tiny.model(1))
    with pytest.raises(ConfigError, match="lean Qwen2"):
        make_drafter("tree", pair, tree=(2, 6))


def test_depth_first_order_keeps_parents_first_and_makes_the_first_child_path_contiguous():
    from specdec.decode.tree import depth_first
    order = depth_first(PARENTS)
    assert order == [0, 1, 4, 7, 5, 2, 6, 3]
    att = verifier_attention((-1, 0, 1, 2, 1, 0), 10)
    assert att.keys[:4] == (11, 12, 13, 14)                  # the first-child path reads a prefix, uncopied
    assert att.keys[4].tolist() == list(range(10)) + [10, 11, 14]
    assert att.positions.tolist() == [10, 11, 12, 13, 12, 11]


def test_tree_shapes_are_predicted_from_counts_and_costs():
    from specdec.decode.tree_shape import choose, predict
    shapes = [{"k": 6, "width": 1, "budget": 6, "tokens_per_round": 4.0, "nodes": 6, "draft_forwards": 6,
               "draft_rows": 6},
              {"k": 6, "width": 3, "budget": 20, "tokens_per_round": 4.8, "nodes": 18, "draft_forwards": 6,
               "draft_rows": 14}]
    flat = {"verify": [57.0, 2.75], "draft": [23.0, 1.3], "round": 30.0}      # Zen 4-like: wide trees are cheap
    steep = {"verify": [130.0, 16.0], "draft": [39.0, 5.0], "round": 30.0}    # AVX2-like
    assert choose(shapes, flat, 6)[:2] == (3, 20)
    assert choose(shapes, steep, 6)[:2] == (1, 6)
    assert choose(shapes, flat, 4)[:2] == (1, 4)              # nothing measured at this depth: the chain
    p = predict(shapes, flat)[0]
    assert p["predicted_ms"] == 6 * 23.0 + 6 * 1.3 + 57.0 + 2.75 * 7 + 30.0  # the round's work besides the forwards


def test_without_measured_shapes_the_default_tree_is_the_chain():
    from specdec.decode.tree_shape import resolve
    pair = _lean_pair()
    cfg, why = resolve(pair, DecodeConfig(k=5))
    assert (cfg.tree_width, cfg.tree_nodes) == (1, 5) and "chain" in why
    cfg, why = resolve(pair, DecodeConfig(k=5, tree_width=2, tree_nodes=9))
    assert (cfg.tree_width, cfg.tree_nodes) == (2, 9) and "requested" in why


def test_the_shape_that_ran_is_decided_once_and_recorded_by_every_entry_point(monkeypatch, capsys):
    """``tree_shape.resolve`` decides the shape before the run; the Generation, the CLI's and the app's
    trace settings all name the shape that ran, never 0 for "this machine's choice"."""
    import json
    from pathlib import Path

    from specdec import ModelChoice, ModelDrafter
    from specdec_ui.state import Loader, Session, form_defaults
    from specdec_ui.tabs import run as run_tab
    pair = _lean_pair()
    gen = start(pair, "w1 w2", DecodeConfig(k=5, max_new_tokens=4), "tree", chat=False)
    assert (gen.cfg.tree_width, gen.cfg.tree_nodes) == (1, 5) and "chain" in gen.tree_shape
    assert type(gen.drafter) is ModelDrafter                   # width 1 is the chain drafter itself
    gen = start(pair, "w1 w2", DecodeConfig(k=3, tree_width=2, tree_nodes=6), "tree", chat=False)
    assert (gen.cfg.tree_width, gen.cfg.tree_nodes) == (2, 6) and "requested" in gen.tree_shape
    form = {**form_defaults(), "prompt": "w1 w2 w3", "drafter": "tree", "k": 3, "max_new_tokens": 4}
    final = list(run_tab.run(Loader(ModelChoice.of(pair), pair), Session(), form))[-1]
    settings = json.loads(Path(final.download).read_text())["settings"]
    assert (settings["tree_width"], settings["tree_nodes"]) == (1, 3)
    import specdec.weights.loading
    from specdec.cli import main
    monkeypatch.setattr(specdec.weights.loading, "load_pair", lambda *a, **kw: pair)
    capsys.readouterr()
    assert main(["generate", "--prompt", "w1 w2 w3", "--drafter", "tree", "--k", "3", "--max-new-tokens", "4",
                 "--json"]) == 0
    out = capsys.readouterr()
    settings = json.loads(out.out)["settings"]
    assert (settings["tree_width"], settings["tree_nodes"]) == (1, 3) and "tree shape W = 1, N = 3, the chain" in out.err
