"""What speculation would gain on other hardware: the acceptance a race measured here, with each machine's
forward times predicted from its memory bandwidth, its multiply-add rate and a cost per layer per forward.

A forward over L rows of a model with W matmul weights stored in N bytes and D decoder layers takes

    t(L) = D·o + max(N / B, L·W / R)

on a machine that reads B bytes a second and does R multiply-adds a second, o being what each layer of
a forward costs besides its arithmetic (kernel launches, dispatch, the framework's Python): the roofline
of Williams et al. (2009) plus a fixed cost per call. From it, in verifier steps t_v(1):

    c = t_d(1) / t_v(1)                      a drafted token (Leviathan et al. 2023, Definition 3.7)
    v(K) = t_v(K + 1) / t_v(1)               a verification of K drafts
    E(K) = 1 + a_1 + a_1·a_2 + ... + a_1···a_K   tokens a round, a_i the measured per-position acceptance
    S(K) = E(K) / (K·c + v(K))               the speed-up (:mod:`specdec.teach.theory`)

a, E and the tokens a round are the pair's and the prompt's, measured on this machine (at T = 0 the
hardware changes them only through rounding); c, v and S are predictions, every one. Left out for the other machines:
a round's own work besides the forwards (sampling, the rule: a few ms on this CPU's Python), which
would lower every S there. This machine is predicted from its own timed forwards and that work
(:class:`specdec.decode.pacing.RoundCosts`, timed once per machine), so that its prediction can be held
against what the race measured.

Why this pair would gain nothing on the study's Apple M2 Max with PyTorch MPS: there, reading the
weights is cheap (400 GB/s: 2.4 ms for this verifier's 0.96 GB, 0.8 ms for the draft's 0.31 GB) and the
cost per layer is not, and both models have about as many layers (24 and 28), so c moves from the
ratio of the bytes (0.32) toward the ratio of the layers (24 / 28 = 0.86): every drafted token costs
most of a verifier step, and a round of K drafts costs more than the E(K) steps it saves unless nearly
every draft is kept. The study's own pair (:data:`STUDY_DRAFT` for :data:`STUDY_VERIFIER`, 6 layers
for 24) had a cheap draft there (c about 0.25); the formula predicts more than the 1.05x it measured,
and what it leaves out is not known here.
"""
from __future__ import annotations

from dataclasses import dataclass

from specdec.decode.pacing import RoundCosts
from specdec.decode.registry import LOOKUP, MODEL, SUFFIX
from specdec.trace import ACCEPTED, RoundTrace


@dataclass(frozen=True)
class Machine:
    name: str
    bandwidth_gb_s: float  # B: the memory bandwidth a forward reads the weights at
    tmac_s: float          # R: multiply-adds a second at the weights' precision, in 10^12
    layer_ms: float        # o: a layer's cost per forward besides its arithmetic
    source: str            # where each number comes from: a spec sheet, a measurement, an assumption


# The M2 Max's cost per layer on MPS is the study's: ~25 ms fixed a forward of GPT-2 Medium's 24 layers
# (docs/results.md). The others' are assumptions, said as such: ~10 kernel launches a layer at ~10 µs each
# in eager PyTorch on CUDA; one launch of a captured graph a forward (about 1 µs a layer) with CUDA graphs.
MACHINES = (
    Machine("Apple M2 Max, PyTorch MPS", 400, 6.8, 1.0,
            "400 GB/s, 38-core GPU 13.6 TFLOPS (6.8 T multiply-adds/s); 1 ms a layer: the study measured about "
            "25 ms fixed cost per forward of its 24-layer GPT-2 Medium on MPS"),
    Machine("Apple M2 Max, a leaner runtime", 400, 6.8, 0.1,
            "the same chip; 0.1 ms a layer is an assumption (about 10 kernels a layer at 10 µs each), "
            "what a runtime like MLX could reach"),
    Machine("a laptop GPU, eager PyTorch", 256, 15, 0.1,
            "an RTX 4060 Laptop class: 256 GB/s; its tensor cores do at least 30 TFLOPS fp16, taken as 15 T "
            "multiply-adds/s (at these few rows a forward is bound by the bandwidth either way); 0.1 ms a layer "
            "assumed (about 10 kernel launches a layer at 10 µs each)"),
    Machine("NVIDIA H200, eager PyTorch", 4800, 495, 0.1,
            "4.8 TB/s HBM3e, 989 TFLOPS bf16 dense (495 T multiply-adds/s); 0.1 ms a layer assumed, as above"),
    Machine("NVIDIA H200, CUDA graphs", 4800, 495, 0.001,
            "the same GPU, each forward one captured graph: about 1 µs a layer assumed"),
)


@dataclass(frozen=True)
class ModelSize:
    """What a forward reads and computes: the matmuls' weights W, their bytes N as stored, the decoder layers D."""

    weights: int
    nbytes: int
    layers: int


# The study this project grew from (docs/results.md): DistilGPT-2 drafting for GPT-2 Medium in float32 on an M2
# Max with PyTorch MPS; 1.05x measured (46.9 vs 44.5 tok/s), 67 % of drafts kept at K = 1. The matmul weights:
# 12·d² a layer (attention 4·d², MLP 8·d²) and the output layer's 50257·d.
STUDY_VERIFIER = ModelSize(24 * 12 * 1024**2 + 50257 * 1024, 4 * (24 * 12 * 1024**2 + 50257 * 1024), 24)
STUDY_DRAFT = ModelSize(6 * 12 * 768**2 + 50257 * 768, 4 * (6 * 12 * 768**2 + 50257 * 768), 6)
STUDY_A, STUDY_SPEEDUP = 0.67, 46.9 / 44.5


def model_size(model) -> ModelSize:
    """A loaded model's :class:`ModelSize`: every module with ``in_features`` and ``out_features`` (specdec's
    packed layers and torch's Linear) counted once, its bytes as stored (``nbytes()`` or the weight's)."""
    weights = nbytes = 0
    for m in model.modules():
        if hasattr(m, "in_features") and hasattr(m, "out_features") and not list(m.children()):
            weights += m.in_features * m.out_features
            nbytes += m.nbytes() if hasattr(m, "nbytes") else m.weight.numel() * m.weight.element_size()
    layers = len(model.layers) if hasattr(model, "layers") else model.config.num_hidden_layers  # specdec's, transformers'
    return ModelSize(weights, nbytes, layers)


def forward_ms(machine: Machine, model: ModelSize, rows: float) -> float:
    """t(L) = D·o + max(N / B, L·W / R), in ms (module docstring)."""
    memory = model.nbytes / (machine.bandwidth_gb_s * 1e9)
    compute = rows * model.weights / (machine.tmac_s * 1e12)
    return model.layers * machine.layer_ms + 1e3 * max(memory, compute)


def expected_tokens(a: list[float] | tuple[float, ...], k: int) -> float:
    """E(K) = 1 + a_1 + a_1·a_2 + ... + a_1···a_K from per-position acceptance; positions past the
    measured ones read the last one measured."""
    if not a:
        return 1.0
    total, chance = 1.0, 1.0
    for i in range(k):
        chance *= a[min(i, len(a) - 1)]
        total += chance
    return total


MIN_TESTED = 5  # a position's share is read from at least this many tests; later positions are pooled


def position_counts(rounds: list[RoundTrace]) -> tuple[tuple[int, int], ...]:
    """(kept, tested) per draft position over the chains of ``rounds``: of the rounds that tested their
    i-th draft, how many kept it (trees left out)."""
    kept: list[int] = []
    tested: list[int] = []
    for r in rounds:
        if r.tree is not None:
            continue
        for i, p in enumerate(x for x in r.positions if x.tested):
            if i == len(tested):
                kept.append(0)
                tested.append(0)
            tested[i] += 1
            kept[i] += p.status == ACCEPTED
    return tuple(zip(kept, tested))


def per_position(counts: tuple[tuple[int, int], ...], min_tested: int = MIN_TESTED) -> tuple[float, ...]:
    """a_i = kept / tested for the leading positions tested at least ``min_tested`` times, then one share
    pooled over every later position (a share of fewer tests says little; a position never tested says
    nothing, and is not a 0), which :func:`expected_tokens` carries on. Empty where nothing was tested."""
    out: list[float] = []
    for i, (k, t) in enumerate(counts):
        if t < min_tested:
            rest = counts[i:]
            kept, tested = sum(k for k, _ in rest), sum(t for _, t in rest)
            return tuple(out) + ((kept / tested,) if tested else ())
        out.append(k / t)
    return tuple(out)


@dataclass(frozen=True)
class Prediction:
    """One machine at one K: every number but ``tokens`` a prediction."""

    machine: str
    k: int
    step_ms: float   # t_v(1): a verifier-only step
    c: float
    v: float
    tokens: float    # E(K), from the measured a_i
    speedup: float   # S(K)


def predict(machine: Machine, verifier: ModelSize, draft: ModelSize, a: tuple[float, ...], k: int) -> Prediction:
    """S(K) on ``machine`` for a draft model drafting chains of K (module docstring)."""
    step = forward_ms(machine, verifier, 1)
    c = forward_ms(machine, draft, 1) / step
    v = forward_ms(machine, verifier, k + 1) / step
    tokens = expected_tokens(a, k)
    return Prediction(machine.name, k, step, c, v, tokens, tokens / (k * c + v))


def predict_here(costs: RoundCosts, a: tuple[float, ...], k: int) -> Prediction:
    """S(K) on this machine from its timed forwards and a round's work besides them (no roofline)."""
    step = costs.forward(1) + costs.besides(0)
    c = costs.drafting(1) / step
    v = (costs.forward(k + 1) + costs.besides(k)) / step
    tokens = expected_tokens(a, k)
    return Prediction("this machine (its timed forwards)", k, step, c, v, tokens, tokens / (k * c + v))


def predict_run_here(costs: RoundCosts, drafted_per_round: float, tokens_per_round: float,
                     draft_forwards: bool = True) -> float:
    """The speed-up this machine's timed costs predict for a run that drafted ``drafted_per_round`` and
    emitted ``tokens_per_round`` on average (chains; the costs are linear in the drafts but for t(L)'s
    interpolation, so the mean round stands for all): tokens per round over the round's time in
    verifier-only steps. ``draft_forwards`` False: a drafter that copies (no forward; its lookup's time
    left out)."""
    d = drafted_per_round
    step = costs.forward(1) + costs.besides(0)
    round_ms = (d * costs.drafting(1) if draft_forwards else 0.0) + costs.forward(d + 1) + costs.besides(d)
    return tokens_per_round / (round_ms / step)


# The drafters this machine's timed costs predict: the draft model's chains (one draft forward a drafted
# token) and the copying drafters' (no forward); the others draft with forwards the table does not time
# (the self-drafter's lean view, a tree's batched rows) or mix both (hybrid).
PREDICTED_HERE = {MODEL.name: True, LOOKUP.name: False, SUFFIX.name: False}


def predict_row_here(costs: RoundCosts, drafter: str, drafted_per_round: float, tokens_per_round: float) -> float | None:
    """:func:`predict_run_here` for a race's row of ``drafter``; None for a drafter it cannot predict."""
    if drafter not in PREDICTED_HERE:
        return None
    return predict_run_here(costs, drafted_per_round, tokens_per_round, PREDICTED_HERE[drafter])


WITHIN = 0.15  # this machine's prediction is called good within 15 % of its measurement


def agreement(predicted: float, measured: float) -> str:
    """Whether a prediction is within :data:`WITHIN` of the measurement, in words."""
    off = predicted / measured - 1
    return (f"within {WITHIN:.0%} (off by {off:+.0%})" if abs(off) <= WITHIN else
            f"NOT within {WITHIN:.0%}: off by {off:+.0%}")
