"""The hot path stays where the logits are: host reads per round, and the rule on the device.

A host read of a tensor (``.item()``, ``.tolist()``, ``int()``, ``float()``, ``bool()``, an index)
is a device synchronisation on CUDA and MPS: the host waits for every queued kernel. The engine's
budget for a chain round of K drafted tokens, from its design:

- drafting: one read per drafted token (its id, with its confidence where the confidence test reads
  it); the K-th id rides on the round's one read of the NaN test and the confidences: K in all;
- verification: ONE read of n_accepted, the next token, the drafter's contract flag and p's NaN test;
- the trace record: ONE read of every small number it shows (tops of p and q, p(x), q(x), beta, ...).

Counted by wrapping those Tensor methods. The model forward and its KV cache (:class:`CachedLM`) are
not counted: they are the model's, upstream of the logits this path starts from.
"""
from __future__ import annotations

import warnings

import pytest
import torch
from helpers import tiny

from specdec import DecodeConfig, Generation, SamplingConfig, make_drafter
from specdec.decode.rule import verify
from specdec.decode.sampling import probs_from_logits
from specdec.model.devices import Clock
from specdec.model.lm import CachedLM

K = 4
DRAFT_READS = K   # one per drafted token
VERIFY_READS = 1  # the verdict, the contract flag and p's NaN test together
RECORD_READS = 1  # the trace's numbers together
READS = ("item", "tolist", "__int__", "__float__", "__bool__", "__index__")
SAMPLINGS = [SamplingConfig(0.0), SamplingConfig(0.8)]


class HostReads:
    """Counts host reads of tensors (and, on CUDA, synchronising calls) during one round; none inside
    CachedLM. ``round(gen)`` -> (reads, syncs or None, the round's trace)."""

    def __init__(self, monkeypatch, cuda: bool = False):
        self.reads, self.on, self.cuda = 0, False, cuda
        for name in READS:
            monkeypatch.setattr(torch.Tensor, name, self._counted(getattr(torch.Tensor, name)))
        for name in ("forward", "forward_tree", "keep", "rollback", "prefill", "__len__"):
            monkeypatch.setattr(CachedLM, name, self._outside(getattr(CachedLM, name)))

    def _counted(self, read):
        def counted(tensor, *args, **kwargs):
            self.reads += self.on
            return read(tensor, *args, **kwargs)
        return counted

    def _outside(self, method):
        def uncounted(*args, **kwargs):
            on, self.on = self.on, False
            if on and self.cuda:
                torch.cuda.set_sync_debug_mode(0)
            try:
                return method(*args, **kwargs)
            finally:
                self.on = on
                if on and self.cuda:
                    torch.cuda.set_sync_debug_mode(1)
        return uncounted

    def round(self, gen: Generation):
        self.reads, self.on = 0, True
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if self.cuda:
                torch.cuda.set_sync_debug_mode(1)  # warn at every synchronising call
            try:
                record = next(gen)
            finally:
                self.on = False
                if self.cuda:
                    torch.cuda.set_sync_debug_mode(0)
        syncs = sum("synchroniz" in str(w.message) for w in caught) if self.cuda else None
        return self.reads, syncs, record


def _generation(pair, sampling: SamplingConfig, drafter: str = "model", confidence: float = 0.0) -> Generation:
    """A run whose rounds all draft K (no stop token, no confidence stop), past its prefill and first round.
    Its clocks are the host's: the engine's Clock waits for the device at every phase boundary, by design,
    to time the phases; that is timing, not the path measured here."""
    host = Clock(torch.device("cpu"))
    cfg = DecodeConfig(max_new_tokens=40, k=K, confidence=confidence, sampling=sampling)
    gen = Generation(pair, tiny.prompt_ids(), cfg,
                     make_drafter(drafter, pair, clock=host, stop_ids=frozenset(), tree=(2, 6), cfg=cfg))
    gen._clock = host
    next(gen)
    return gen


def _chain_pair(device: torch.device | str = "cpu"):
    target = tiny.model(1, scale=4)
    draft = tiny.noisy_copy(target, 2, 0.5)
    pair = tiny.pair(target.to(device), draft.to(device))
    pair.device, pair.stop_ids = torch.device(device), frozenset()
    return pair


@pytest.mark.parametrize("sampling", SAMPLINGS, ids=["T=0", "T=0.8"])
@pytest.mark.parametrize("confidence", [0.0, 1e-9], ids=["constant-K", "confidence-test"])
def test_a_chain_round_reads_the_host_once_per_drafted_token(monkeypatch, sampling, confidence):
    gen = _generation(_chain_pair(), sampling, confidence=confidence)
    reads, _, record = HostReads(monkeypatch).round(gen)
    assert len(record.positions) == K
    assert reads <= DRAFT_READS + VERIFY_READS + RECORD_READS, f"{reads} host reads in a round of K = {K}"


@pytest.mark.parametrize("sampling", SAMPLINGS, ids=["T=0", "T=0.8"])
def test_a_tree_round_reads_the_host_per_depth_not_per_node(monkeypatch, sampling):
    """Per depth D of the tree: one read per draft forward (a node's confidence, child count and top W),
    one of the children drawn (T > 0), and the rule's walk one per depth (its selection of the trials
    testing a sibling slot keeps the draws, hence a seed's stream, exactly as on the CPU); plus the
    drafter-contract check (T > 0), the verification and the record."""
    target = tiny.model(1, scale=4)
    pair = tiny.pair(tiny.lean(target), tiny.lean(tiny.noisy_copy(target, 2, 0.5)))
    pair.stop_ids = frozenset()
    gen = _generation(pair, sampling, drafter="tree")
    reads, _, record = HostReads(monkeypatch).round(gen)
    depth = max(n.depth for n in record.tree.nodes)
    nodes = len(record.tree.nodes) - 1
    sampled = not sampling.greedy
    bound = depth + sampled * depth + (depth + 1) + sampled + VERIFY_READS + RECORD_READS
    assert nodes > depth >= 1 and reads <= bound, f"{reads} host reads for {nodes} nodes of depth {depth}"


def _rule_emits_p(device: torch.device, trials: int = 200_000, k: int = 3, vocab: int = 12):
    """tests/decode/test_lossless.py's one-round check on ``device``: drafts, q, p, the draws and the rule all there."""
    from specdec.teach.experiment import tv_distance as tv
    from specdec.teach.experiment import tv_noise_bound as noise_bound

    def hist(tokens, v):
        return torch.bincount(tokens, minlength=v).float() / len(tokens)
    sampling = SamplingConfig(0.9, top_k=8, top_p=0.9)
    g = torch.Generator().manual_seed(0)
    target_logits = (2 * torch.randn(k + 1, vocab, generator=g)).to(device)                # (K+1, V)
    p = probs_from_logits(target_logits, sampling)                                           # (K+1, V)
    q = probs_from_logits(target_logits[:k] + torch.randn(k, vocab, generator=g).to(device), sampling)  # (K, V)
    assert p.device == q.device == target_logits.device and p.dtype == torch.float32
    gen = torch.Generator(device=device).manual_seed(0)
    drafts = torch.stack([torch.multinomial(q[i], trials, replacement=True, generator=gen) for i in range(k)], 1)
    v = verify(drafts, q.expand(trials, k, vocab), p.expand(trials, k + 1, vocab), gen)
    assert v.next_token.device == v.n_accepted.device == p.device
    emitted = torch.where(torch.arange(k + 1, device=device) < v.n_accepted[:, None],
                          torch.cat([drafts, drafts[:, :1]], 1), v.next_token[:, None])      # (TRIALS, K+1)
    p, emitted, n_accepted = p.cpu(), emitted.cpu(), v.n_accepted.cpu()
    for i in range(k + 1):
        reached = n_accepted >= i
        n = int(reached.sum())
        assert n > 5000
        assert tv(hist(emitted[reached, i], vocab), p[i]) <= noise_bound(p[i], n), f"position {i} ({n} trials)"
    beta = torch.minimum(p[0], q[0].cpu()).sum().item()
    assert abs((n_accepted >= 1).float().mean().item() - beta) < 0.005


@pytest.mark.gpu
class TestOnTheDevice:
    """The same checks where the logits live on a CUDA or MPS device."""

    @pytest.mark.parametrize("sampling", SAMPLINGS, ids=["T=0", "T=0.8"])
    def test_a_chain_round_reads_and_syncs_once_per_drafted_token(self, monkeypatch, gpu_device, sampling):
        gen = _generation(_chain_pair(gpu_device), sampling, confidence=1e-9)
        counter = HostReads(monkeypatch, cuda=gpu_device.type == "cuda")
        reads, syncs, record = counter.round(gen)
        budget = DRAFT_READS + VERIFY_READS + RECORD_READS
        assert len(record.positions) == K and reads <= budget, f"{reads} host reads in a round of K = {K}"
        if syncs is not None:  # CUDA's own count: also an implicit sync (a copy, a nonzero) would show here
            assert syncs <= budget, f"{syncs} synchronising CUDA calls in a round of K = {K}"
        for pos in record.positions:
            if pos.tested:
                assert abs(pos.ratio - pos.p / pos.q) < 1e-5 and 0 < pos.u <= 1
            assert 0 <= pos.beta <= 1 + 1e-6 and pos.candidates

    def test_the_rule_emits_p_there(self, gpu_device):
        _rule_emits_p(gpu_device)

    def test_top_p_there_is_the_cpus(self, gpu_device):
        """On a device top-p always takes the full sort; the CPU's shortcut gives the same nucleus."""
        logits = 4 * torch.randn(3, 20_000, generator=torch.Generator().manual_seed(2))   # > 4 * 1024 entries
        for top_p in (0.5, 0.95):
            cpu = probs_from_logits(logits, SamplingConfig(1.0, 0, top_p))
            there = probs_from_logits(logits.to(gpu_device), SamplingConfig(1.0, 0, top_p))
            assert there.device.type == gpu_device.type
            assert torch.equal(there.cpu() > 0, cpu > 0)
            assert torch.allclose(there.cpu(), cpu, atol=1e-6)
