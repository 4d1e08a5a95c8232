"""Timing each kernel variant once per machine, so that the choice is the same run after run.

The machines this runs on are shared: a neighbour can slow one timing by 5x. So the variants are
timed **interleaved** (one call of each in turn, ``REPS`` times: a change in load hits them all
alike), each call on another copy of the layer so its weights come from memory as in a real
forward, the **median** of each is kept with its spread (min and max), and a variant an order of
magnitude slower than the fastest after ``WARM_REPS`` reps is not timed further (a reference path
can take seconds a call). :func:`specdec.model.precision.pick` then wants a margin before preferring
one variant over another. The table is cached per CPU model, flags, torch version and shapes.

The same measurement then times specdec's prefetch settings (:data:`specdec.model.native.PREFETCH_CANDIDATES`)
on the verifier's kernel where it is specdec's: one layer (and its copies) under each setting in turn.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import statistics
import time
import warnings
from pathlib import Path

import torch

from specdec.model import native
from specdec.model.kernels import PackedLinear
from specdec.options import cache_root

CALIBRATION_VERSION = 8  # bump when the variants or the measurement change: older caches are ignored
CALIBRATION_SHAPE = (8960, 1536)  # (out, in) of the verifier's MLP up-projection
REPS = 15
WARM_REPS = 2       # reps before a variant SKIP_FACTOR x slower than the fastest is dropped
SKIP_FACTOR = 10
HEAD_ROWS = 16384   # rows of the draft's output layer timed (then scaled to all): see calibrate_draft
CPU = torch.device("cpu")  # what is timed here: the CPU's kernels


def cache_bytes() -> dict[int, int]:
    """{level: bytes} of the first CPU's data caches, from sysfs (empty where it cannot be read)."""
    sizes: dict[int, int] = {}
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            if (index / "type").read_text().strip() == "Instruction":
                continue
            text = (index / "size").read_text().strip()
            sizes[int((index / "level").read_text())] = int(text[:-1]) * {"K": 2**10, "M": 2**20, "G": 2**30}[text[-1]]
        except (OSError, ValueError, KeyError):
            pass
    return sizes


def last_level_cache_bytes() -> int:
    """The largest CPU cache (64 MiB where it cannot be read)."""
    return max(cache_bytes().values(), default=64 * 2**20)


def _ring(layer: PackedLinear) -> list[PackedLinear]:
    """Copies of a layer that together are 1.5x the largest cache (300 MB of L3 on some Xeons), so
    that cycling through them reads weights from memory, as a forward does."""
    copies = max(2, min(24, -(-3 * last_level_cache_bytes() // (2 * layer.nbytes()))))
    return [layer] + [layer.clone() for _ in range(copies - 1)]


def measure(layers: dict[str, PackedLinear], rows: list[int], reps: int = REPS, setups: dict | None = None) -> dict:
    """ms of one call of each layer at each row count: ``timings_ms`` {label: [median per row
    count]}, ``spread_ms`` {label: [[min, max] per row count]}, ``skipped`` {label: why}.
    ``setups`` {label: function}: called, untimed, before each of that label's turns; labels may
    then share one layer (and its copies) under different settings."""
    distinct = {id(layer): layer for layer in layers.values()}
    copies = {key: _ring(layer) for key, layer in distinct.items()}
    rings = {label: copies[id(layer)] for label, layer in layers.items()}
    inputs = {r: torch.randn(r, next(iter(layers.values())).in_features) for r in rows}
    samples: dict[str, list[list[float]]] = {label: [[] for _ in rows] for label in layers}
    skipped: dict[str, str] = {}
    calls = 0
    for rep in range(reps + 1):  # the first sweep only warms up
        for label, ring in rings.items():
            if label in skipped:
                continue
            if setups:
                setups[label]()
            for i, r in enumerate(rows):
                calls += 1  # every call on the next copy: none finds its weights in cache
                t0 = time.perf_counter()
                ring[calls % len(ring)](inputs[r])
                if rep:
                    samples[label][i].append((time.perf_counter() - t0) * 1e3)
        if rep == WARM_REPS:
            cost = {label: sum(min(s) for s in samples[label]) for label in rings if label not in skipped}
            best = min(cost.values())
            for label, c in cost.items():
                if c > SKIP_FACTOR * best:
                    skipped[label] = f"{c / best:.0f}x the fastest after {WARM_REPS} reps: not timed further"
                    rings[label] = []
    return {"timings_ms": {label: [statistics.median(s) for s in samples[label]] for label in layers},
            "spread_ms": {label: [[min(s), max(s)] for s in samples[label]] for label in layers},
            "skipped": skipped}


@contextlib.contextmanager
def _quietly():
    """Timing torch's deprecated quantized engine (fbgemm) must not warn a user who will not run it;
    a choice of it says so in its reason (:func:`specdec.model.precision.pick`)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*quantized tensor creation functions.*deprecated")
        yield


def calibrate(variants: list, k: int, shape: tuple[int, int] = CALIBRATION_SHAPE) -> dict:
    """The verifier's table: ms of one verifier-sized layer (``shape``, (out, in)) at 1 and K+1 rows,
    per variant (:class:`specdec.model.precision.Precision`), batch-invariant as the verifier must be."""
    weight = torch.randn(*shape) * 0.02
    with _quietly():
        return measure({v.label: v.layers(CPU).build(weight, None) for v in variants}, [1, k + 1])


def calibrate_prefetch(variant, k: int) -> dict:
    """The prefetch settings' table: ms of the verifier's layer in ``variant`` (specdec's int8 or
    int4) at 1 and K+1 rows under each of :data:`specdec.model.native.PREFETCH_CANDIDATES`; the
    library's setting is left as it was."""
    layer = variant.layers(CPU).build(torch.randn(*CALIBRATION_SHAPE) * 0.02, None)
    candidates = native.PREFETCH_CANDIDATES
    before = native.prefetch()
    try:
        return measure({p.label: layer for p in candidates}, [1, k + 1],
                       setups={p.label: functools.partial(native.set_prefetch, p) for p in candidates})
    finally:
        native.set_prefetch(before)


def calibrate_draft(variants: list, shapes: dict) -> dict:
    """The draft's table: per variant, [ms of one layer's four matmuls, ms of the output layer] at
    1 row, without batch invariance. Its estimated matmul time per token is layers * first + second.

    The output layer is timed on its first ``HEAD_ROWS`` rows and scaled to all of them: at one row
    its time is its bytes read (memory-bound), and the whole layer in every variant at once, each
    with its ring of copies, was most of a first run's peak memory (a 151936-row float32 layer is
    545 MB, and every variant holds at least two copies)."""
    parts = []
    vocab, hidden = shapes["head"]
    head = (min(vocab, HEAD_ROWS), hidden)
    for shape in shapes["layer"] + [head]:
        weight = torch.randn(*shape) * 0.02
        layers = {v.label: v.layers(CPU, batch_invariant=False).build(weight, None) for v in variants}
        del weight
        with _quietly():
            parts.append(measure(layers, [1], reps=REPS if shape is not head else REPS // 2))
        del layers
    labels = [v.label for v in variants]
    *layer, head_part = parts
    scale = vocab / head[0]
    return {"timings_ms": {n: [sum(p["timings_ms"][n][0] for p in layer), scale * head_part["timings_ms"][n][0]]
                           for n in labels},
            "spread_ms": {n: [p["spread_ms"][n][0] for p in layer] + [[scale * x for x in head_part["spread_ms"][n][0]]]
                          for n in labels},
            "skipped": {n: why for p in parts for n, why in p["skipped"].items()},
            "head_rows_timed": head[0]}


def _file(key_parts: list, cpu: dict) -> Path:
    key = hashlib.sha256(json.dumps([cpu, torch.__version__, CALIBRATION_VERSION, *key_parts]).encode())
    return cache_root() / "calibration" / f"{key.hexdigest()[:16]}.json"


def cached(key_parts: list, cpu: dict, measure_table) -> dict[str, list[float]]:
    """The medians of a table, measured once (``measure_table()``) and then read from the cache."""
    path = _file(key_parts, cpu)
    if path.is_file():
        return json.loads(path.read_text())["timings_ms"]
    table = measure_table()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"cpu": cpu, "torch": torch.__version__, "for": key_parts, **table}))
    tmp.replace(path)  # never a half-written table
    return table["timings_ms"]
