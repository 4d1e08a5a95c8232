"""The kernels against their roofline: the fastest a forward could run on this machine, and each
measured forward as a ratio to it (``benchmarks/profile.py`` measures and renders it).

A forward over L rows reads every weight once and does L multiply-adds per weight, so its bound is

    bound(L) = max(weight bytes / B, L * weights / R(L))

with both rates measured on the model's own kernel (its precision's layers, as the model builds them):

* B, the memory bandwidth as the kernel sees it: one call at 1 row on a layer of several hundred MB
  (many times the last-level cache), its bytes over the fastest call's time;
* R(L), the multiply-adds per second at L rows with the weights resident in L2: the kernel on two
  layers of one width, both within the L2 caches of the threads that share them, each called many
  times back to back; the larger's extra multiply-adds over its extra time, so that a call's fixed
  cost (threads, dispatch, quantising the rows) is not counted as compute.

A forward's weights are its matmuls' (in x out, the output layer included); attention over the
context and the embedding row are left out (about 1 % of the multiply-adds at a 200-token context).
A ratio of 1 is the physical limit; above it is what the kernel and the forward around it do not
reach: per-call fixed costs, attention, norms, reading and computing not overlapped.
"""
from __future__ import annotations

import torch

from specdec.model.calibration import CALIBRATION_SHAPE, cache_bytes, last_level_cache_bytes
from specdec.model.kernels import PackedLinear
from specdec.model.timing import Timed, fastest_ms

CPU = torch.device("cpu")
BANDWIDTH_BYTES = 400e6  # the bandwidth probe's layer, at least: hundreds of MB ...
BANDWIDTH_LLC = 8        # ... and this many times the last-level cache
REPEAT = 50              # calls of an L2-resident layer per timed sample (each takes microseconds)


def matmuls(model) -> tuple[int, int]:
    """(bytes, weights) of a model's matmuls: its packed layers (and transformers' own Linear layers)."""
    layers = [m for m in model.modules() if isinstance(m, (PackedLinear, torch.nn.Linear))]
    nbytes = sum(m.nbytes() if isinstance(m, PackedLinear) else m.weight.numel() * m.weight.element_size()
                 for m in layers)
    return nbytes, sum(m.in_features * m.out_features for m in layers)


def _layer(layers, rows: int, features: int) -> PackedLinear:
    """A layer of ``rows`` x ``features`` random weights, built as a model builds its own."""
    return layers.build(torch.randn(rows, features) * 0.02, None)


def bandwidth_layer(layers, big_bytes: float | None = None) -> PackedLinear:
    """The bandwidth probe's layer: ``big_bytes`` (default: the larger of BANDWIDTH_BYTES and
    BANDWIDTH_LLC x the last-level cache), the verifier calibration layer's width. specdec's kernels
    keep plain blocks of whole 16-row groups (their ``state``), so one 4096-row layer's state
    repeated along its rows is a layer of hundreds of MB, made in a second with no float32 copy."""
    features = CALIBRATION_SHAPE[1]
    target = big_bytes or max(BANDWIDTH_BYTES, BANDWIDTH_LLC * last_level_cache_bytes())
    per_row = _layer(layers, 64, features).nbytes() / 64
    base = _layer(layers, min(4096, max(64, int(target / per_row) // 64 * 64)), features)
    times = max(1, round(target / base.nbytes()))
    if not layers.kernel.keeps_state:
        return _layer(layers, base.out_features * times, features)
    state = {name: t.repeat(times, *[1] * (t.dim() - 1)) for name, t in base.state().items() if name != "shape"}
    return layers.restore({**state, "shape": torch.tensor([base.out_features * times, features])}, None)


def bandwidth_gb_s(layer: PackedLinear, reps: int = 7) -> float:
    """GB/s the kernel reads ``layer``'s weights at: its bytes over the fastest of ``reps`` one-row calls."""
    x = torch.randn(1, layer.in_features)
    ms = fastest_ms({"big": Timed(lambda: None, lambda n: layer(x))}, [1], reps)["big"][1]
    return layer.nbytes() / ms / 1e6


def compute_rates(layers, rows: list[int], threads: int, reps: int = 11) -> dict[int, float]:
    """{L: multiply-adds per second} of the kernel at L rows, its weights in L2 (module docstring):
    two layers of the verifier calibration layer's width, the larger about one L2 per two threads."""
    features = CALIBRATION_SHAPE[1]
    per_row = _layer(layers, 64, features).nbytes() / 64
    unit = 16 * max(threads, 1)  # whole 16-row blocks for every thread
    large = max(2 * unit, int(cache_bytes().get(2, 2**20) * max(threads, 1) / 2 / per_row) // unit * unit)
    sizes = {n: _layer(layers, n, features) for n in (large // 2, large)}
    inputs = {n: torch.randn(n, features) for n in rows}

    def calls(layer):
        def forward(n):
            for _ in range(REPEAT):
                layer(inputs[n])
        return Timed(lambda: None, forward)
    ms = fastest_ms({n: calls(layer) for n, layer in sizes.items()}, rows, reps)
    extra_s = {n: (ms[large][n] - ms[large // 2][n]) / REPEAT / 1e3 for n in rows}
    # None where the larger layer was not slower: noise (tiny models), no rate to read
    return {n: n * features * (large - large // 2) / s if s > 0 else None for n, s in extra_s.items()}


def bound(nbytes: int, weights: int, gb_s: float, rates: dict[int, float | None],
          measured_ms: dict[int, float]) -> dict[str, dict]:
    """{L: the bound, what sets it, the measured forward and its ratio to the bound} for each L of
    ``rates`` (the JSON's keys: L as a string); without a rate at L, the memory term alone."""
    out = {}
    for n, rate in rates.items():
        memory_ms = nbytes / gb_s / 1e6
        compute_ms = n * weights / rate * 1e3 if rate else None
        limit = max(memory_ms, compute_ms or 0.0)
        got = measured_ms.get(n)
        out[str(n)] = {"memory_ms": memory_ms, "compute_ms": compute_ms, "bound_ms": limit,
                       "bound_by": "compute" if compute_ms and compute_ms > memory_ms else "memory",
                       "measured_ms": got, "ratio": got / limit if got else None}
    return out


def probes(layers: dict[str, object], big_bytes: float | None = None):
    """A function that probes, per model (``layers``: {role: its precision's layers}), the bandwidth
    its kernel reads a large layer at, each call one {role: GB/s}: profile.py calls it before,
    between and after its fits (these shared machines drift) and bounds with the best."""
    big = {role: bandwidth_layer(each, big_bytes) for role, each in layers.items()}
    return lambda: {role: bandwidth_gb_s(layer) for role, layer in big.items()}


def against(models: dict[str, tuple], bandwidths: list[dict[str, float]], rows: list[int], threads: int,
            measured_ms: dict[str, dict[int, float]]) -> dict[str, dict]:
    """Per model ({role: (model, its precision's layers, the precision's label)}): its kernel's
    bandwidths and compute rates, its bytes and weights, and at each of ``rows`` the bound and the
    measured forward's ratio to it (:func:`bound`)."""
    out = {}
    for role, (model, layers, label) in models.items():
        nbytes, weights = matmuls(model)
        gb_s, rates = max(b[role] for b in bandwidths), compute_rates(layers, rows, threads)
        out[role] = {"precision": label, "kernel": layers.kernel.__name__, "weight_bytes": nbytes, "weights": weights,
                     "bandwidth_gb_s": [b[role] for b in bandwidths],
                     "gmac_s": {str(n): r / 1e9 if r else None for n, r in rates.items()},
                     "rows": bound(nbytes, weights, gb_s, rates, measured_ms[role])}
    return out
