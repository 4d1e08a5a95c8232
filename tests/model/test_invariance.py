"""A needle test of batch invariance, in the style of vLLM's batch-invariance tests: seeded random
rounds (K, rejections, token trees, context lengths, thread counts 1 and 2), every verification
row's logits bitwise those of the one-row path at its position; and long greedy generations across
K and drafters equal to verifier-only, token for token.

Bitwise is promised by the representations whose every layer is batch-invariant (``invariant``):
specdec's int8 and int4 kernels (exact integer sums per row, int4's groups added in a fixed order,
the same bits whatever the rows, threads or instruction set: :mod:`specdec.model.native`), or where
they are not built, fbgemm's int8 with a scale per row; the lean forward's attention runs each
verification row as the one-row forward at its position would (:mod:`specdec.model.qwen2`)."""
import random

import pytest
import torch
from helpers import tiny

from specdec import DecodeConfig, Generation, make_drafter
from specdec.decode.proposal import ancestors, depths
from specdec.decode.registry import DRAFTERS, VERIFIER_ONLY
from specdec.decode.tree import verifier_attention
from specdec.model import native
from specdec.model.kernels import PackedLinear
from specdec.model.lm import CachedLM
from specdec.model.precision import cpu_candidates

pytestmark = pytest.mark.usefixtures("one_thread")  # which also puts the thread count back after each test

SEED = 39
INVARIANT = ["int8", "int4"] if native.available() else [p for p in ["int8"] if p in cpu_candidates()]
SKIP = pytest.mark.skipif(not INVARIANT, reason="no batch-invariant representation here: " + native.status()[1])


def _random_tree(g: random.Random, nodes: int, depth: int) -> list[int]:
    """Parents of a random tree of ``nodes`` nodes under the root, none deeper than ``depth``."""
    parents = [-1]
    while len(parents) <= nodes:
        p = g.randrange(len(parents))
        if depths(parents)[p] < depth:
            parents.append(p)
    return parents


def _reference_threads(g: random.Random) -> int:
    return 2 if g.random() < 0.1 else 1


def _one_row(lm: CachedLM, ids: list[int]) -> torch.Tensor:
    """The one-row path: each token its own forward, as verifier-only decoding feeds them."""
    return torch.cat([lm.forward([t], keep=1) for t in ids])                           # (len(ids), V)


@SKIP
@pytest.mark.parametrize("precision", INVARIANT)
def test_every_verification_row_is_bitwise_the_one_row_path(precision):
    """Two caches walk one token sequence: the reference one row at a time, the other in rounds
    as the engine makes them, a chain of K + 1 rows whose rows after the first n are rejected (rolled
    back), or a token tree whose nodes off one kept path are wrong tokens. Each round and each
    reference path on 1 or 2 threads, drawn at random (the reference seldom on 2: on a loaded 2-core
    machine a tiny forward on 2 threads waits for the second core, up to 100x as long)."""
    g = random.Random(SEED)
    # head size 64, as the embedded pair's: specdec's attention op runs its vector loop (at the tiny
    # model's head size 8 torch's attention runs instead, whose bits depend on the thread count)
    lean = tiny.lean(tiny.model(SEED, scale=4, hidden=256), precision)
    assert all(m.invariant for m in lean.modules() if isinstance(m, PackedLinear))
    for prompt in (g.randint(2, 40), g.randint(41, 120)):                                # both prefill paths
        seq = [g.randrange(tiny.V) for _ in range(prompt + 90)]
        ref, lm = CachedLM(lean, tiny.V), CachedLM(lean, tiny.V)
        ref.forward(seq[:prompt - 1], keep=1)
        lm.forward(seq[:prompt - 1], keep=1)
        pos = prompt - 1                                                                # both caches hold seq[:pos]
        while pos < len(seq) - 20:
            torch.set_num_threads(g.choice([1, 2]))                                     # the verification's
            k = g.randint(1, 16)
            if g.random() < 0.3:
                parents = _random_tree(g, g.randint(2, 16), k)
                kept = ancestors(parents, g.randrange(len(parents)))                    # the path that is right
                d = depths(parents)
                toks = [seq[pos + d[j]] if j in kept else g.randrange(tiny.V) for j in range(len(parents))]
                got = lm.forward_tree(toks, verifier_attention(parents, pos))           # (N+1, V)
                torch.set_num_threads(_reference_threads(g))
                for j in range(len(parents)):
                    want = _one_row(ref, [toks[a] for a in ancestors(parents, j)])[-1]
                    ref.rollback(seq[:pos + 1])
                    assert torch.equal(got[j], want), (prompt, pos, parents, j)
                lm.keep(pos + 1, [pos + j for j in kept[1:]])
                step = len(kept)
                _one_row(ref, seq[pos:pos + step])
            else:
                step = g.randint(1, k + 1)                                              # rows up to the rejection
                rows = seq[pos:pos + step] + [g.randrange(tiny.V) for _ in range(k + 1 - step)]
                got = lm.forward(rows, keep=k + 1)[:step]                               # (step, V)
                lm.rollback(seq[:pos + step + 1])
                torch.set_num_threads(_reference_threads(g))
                assert torch.equal(got, _one_row(ref, seq[pos:pos + step])), (prompt, pos, k, step)
            pos += step
            assert len(lm) == len(ref) == pos


LONG = 300  # new tokens per generation


@SKIP
@pytest.mark.parametrize("precision", INVARIANT)
def test_long_greedy_generations_equal_verifier_only_across_k_and_drafters(precision):
    g = random.Random(SEED + 1)
    target = tiny.model(SEED, scale=8, positions=1024)
    # a draft close enough to keep about two tokens a round: acceptance and rejection all along
    pair = tiny.pair(tiny.lean(target, precision), tiny.lean(tiny.noisy_copy(target, 1, 0.1), precision,
                                                              batch_invariant=False))
    prompt = tiny.prompt_ids(8, seed=SEED) * 2                                          # something to look up
    base = Generation(pair, prompt, DecodeConfig(max_new_tokens=LONG, ignore_eos=True),
                      make_drafter(VERIFIER_ONLY.name, pair)).run()
    for name in [d for d in DRAFTERS if d != VERIFIER_ONLY.name]:
        for _ in range(2):
            k, tree = g.randint(2, 12), (g.randint(2, 4), g.randint(4, 16))
            cfg = DecodeConfig(k=k, max_new_tokens=LONG, ignore_eos=True, confidence=g.choice([0.0, 0.6]),
                               tree_width=tree[0], tree_nodes=tree[1])
            spec = Generation(pair, prompt, cfg, make_drafter(name, pair, tree=tree)).run()
            assert spec.token_ids == base.token_ids, (name, cfg)
            s = spec.summary()
            assert 0 < s.accepted < s.drafted, (name, cfg)                              # kept and rejected drafts
