"""What runs where specdec's C++ kernels are not (a GPU, macOS, ARM, a machine without a compiler),
run on every machine by switching them off (:func:`specdec.model.native.disabled`): torch's kernels
for the linears and the lean forward's own attention, row by row for a verification. Each row sees
exactly the tokens before it; the logits are transformers' and those of the kernels' path; greedy
speculative output is the verifier's, for chains and a tree."""
import pytest
import torch
from helpers import tiny

from specdec import DecodeConfig, Generation, make_drafter
from specdec.decode.proposal import ancestors
from specdec.decode.tree import verifier_attention
from specdec.model import native
from specdec.model.kernels import PackedLinear
from specdec.model.lm import CachedLM
from specdec.model.precision import cpu_candidates
from specdec.model.qwen2 import TreeAttention

# Without specdec's kernels int8 runs on fbgemm's quantized tensors, which torch now calls deprecated:
# that is what such a machine runs, so its warning is expected here (where our kernels are built, nothing warns)
pytestmark = [pytest.mark.usefixtures("one_thread"),
              pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor:UserWarning")]

with native.disabled():
    FALLBACKS = [p for p in ("float32", "int8", "int4") if p in cpu_candidates()]
KERNELS_HERE = native.available()
ROWS = 80  # output rows a multiple of 16: torch's int4 kernel packs no fewer
PARENTS = (-1, 0, 0, 0, 1, 1, 2, 4, 7)


@pytest.fixture
def kernels_off():
    with native.disabled():
        yield


def invariant(lean) -> bool:
    """Whether every linear of the model promises bitwise batch invariance (fbgemm's int8 with a
    scale per row does; torch's float32 and int4 GEMMs sum in an order that may depend on the rows)."""
    return all(m.invariant for m in lean.modules() if isinstance(m, PackedLinear))


def assert_same(got, want, exact: bool):
    """Bitwise where the layers promise it; else within rounding, far below what a row that sees
    another token changes (tenths of a logit)."""
    if exact:
        assert torch.equal(got, want)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_the_switch_turns_every_kernel_off(kernels_off):
    """No layer is built on specdec's kernels, and a verification runs without calling its library
    (which refuses every call while switched off, its attention op too)."""
    lean = tiny.lean(tiny.model(0, rows=ROWS), FALLBACKS[-1])
    assert not native.available() and "switched off" in native.status()[1]
    assert all("specdec" not in m.kind for m in lean.modules() if isinstance(m, PackedLinear))
    with pytest.raises(RuntimeError, match="switched off"):
        native.ops()
    CachedLM(lean, tiny.V).forward(tiny.prompt_ids(8), keep=4)


@pytest.mark.skipif(not KERNELS_HERE, reason=native.status()[1])
def test_a_layer_on_the_kernels_refuses_to_run_while_they_are_off():
    lean = tiny.lean(tiny.model(0), "int8")
    with native.disabled(), pytest.raises(RuntimeError, match="switched off"):
        CachedLM(lean, tiny.V).forward([1, 2], keep=1)
    assert native.available()                                  # and the switch is back on after the block


@pytest.mark.parametrize("precision", FALLBACKS)
@pytest.mark.parametrize("cached", [1, 5, 17])
def test_each_verification_row_sees_exactly_the_tokens_before_it(precision, cached, kernels_off):
    """A 9-row forward against 9 one-token forwards after the same context."""
    lean = tiny.lean(tiny.model(3, scale=4, rows=ROWS), precision)
    ids = tiny.prompt_ids(cached + 9, seed=cached)
    assert_same(*tiny.verification_and_single_rows(lean, ids, cached=cached), invariant(lean))


@pytest.mark.parametrize("precision", FALLBACKS)
@pytest.mark.parametrize("exact", [True, False])
def test_each_tree_node_sees_exactly_its_ancestors(precision, exact, kernels_off):
    """The verifier's exact tree attention (``exact``) and the draft's fused masked one: each node
    against one-token forwards along its path."""
    lean = tiny.lean(tiny.model(0, scale=4, rows=ROWS), precision)
    ctx, toks = tiny.prompt_ids(20, seed=1), tiny.prompt_ids(len(PARENTS), seed=5)
    lm = CachedLM(lean, tiny.V)
    lm.forward(ctx[:-1], keep=1)
    att = verifier_attention(PARENTS, len(lm))
    tree = lm.forward_tree([ctx[-1]] + toks[1:], TreeAttention(att.positions, att.keys, exact))  # (N+1, V)
    for j in range(len(PARENTS)):
        chain = CachedLM(lean, tiny.V)
        chain.forward(ctx[:-1], keep=1)
        path = [ctx[-1]] + [toks[a] for a in ancestors(PARENTS, j)[1:]]
        want = [chain.forward([t], keep=1) for t in path][-1][0]
        assert_same(tree[j], want, exact and invariant(lean))


def _chunked_logits(lean, ids):
    """Logits of every token, fed as a 12-row chunk, one row, then 7 rows (every attention branch)."""
    lm = CachedLM(lean, tiny.V)
    return torch.cat([lm.forward(ids[:12], keep=12), lm.forward(ids[12:13], keep=1), lm.forward(ids[13:], keep=7)])


def test_the_float32_fallback_gives_transformers_logits(kernels_off):
    hf = tiny.model(0, scale=4)
    ids = tiny.prompt_ids(20, seed=2)
    with torch.inference_mode():
        want = hf(torch.tensor([ids])).logits[0, :, : tiny.V]
    torch.testing.assert_close(_chunked_logits(tiny.lean(hf), ids), want, rtol=1e-4, atol=1e-4)


# The relative distance between torch's kernels and specdec's on the same weights: float32 differs
# in the attention's summation order only; int8 in the activations' rounding (fbgemm's 7 bits); int4
# in the activations (torch's are bf16). Measured 1.2-1.5 % (int8) and 1.2-2.3 % (int4) on three seeds.
CLOSE = {"float32": 1e-6, "int8": 0.05, "int4": 0.05}


@pytest.mark.skipif(not KERNELS_HERE, reason=native.status()[1])
@pytest.mark.parametrize("precision", FALLBACKS)
def test_the_fallback_gives_the_kernels_logits(precision):
    hf = tiny.model(1, scale=4, rows=ROWS)
    ids = tiny.prompt_ids(20, seed=3)
    kernels = _chunked_logits(tiny.lean(hf, precision), ids)
    with native.disabled():
        fallback = _chunked_logits(tiny.lean(hf, precision), ids)
    assert float((fallback - kernels).norm() / kernels.norm()) < CLOSE[precision]


@pytest.mark.parametrize("precision", [p for p in FALLBACKS if p != "int4"])  # int4: torch's kernel, not invariant
@pytest.mark.parametrize("drafter,k,tree", [("model", 1, (0, 0)), ("model", 3, (0, 0)), ("model", 7, (0, 0)),
                                            ("tree", 4, (3, 12))])
def test_greedy_speculative_output_is_the_verifiers(precision, drafter, k, tree, kernels_off):
    target = tiny.model(4, scale=8, rows=ROWS)
    draft = tiny.noisy_copy(target, seed=5, noise=0.5)
    pair = tiny.pair(tiny.lean(target, precision), tiny.lean(draft, precision, batch_invariant=False))
    cfg = DecodeConfig(max_new_tokens=48, k=k, ignore_eos=True, tree_width=tree[0], tree_nodes=tree[1])
    prompt = tiny.prompt_ids(8, seed=k)
    spec = Generation(pair, prompt, cfg, make_drafter(drafter, pair, tree=tree)).run()
    base = Generation(pair, prompt, cfg, make_drafter("none", pair)).run()
    assert spec.token_ids == base.token_ids
    assert 0 < spec.summary().accepted < spec.summary().drafted   # partial acceptance: rows are compared
