"""How a forward's cost is measured, and the one line fitted to it: t(L) = t_f + t_r·L (names: docs/notation.md).

t_f is the fixed part (reading the weights once), t_r the cost of each extra row (its compute).

:func:`time_forward` is the one timer of "a forward over L new rows after a C-token context": the
tree shape's per-machine costs (:mod:`specdec.decode.tree_shape`, what the app predicts with) and the
benchmarks (``profile``, ``gpu_costs``, ``levers``, ``runtime_compare``) all time through it, so
their numbers mean the same thing. :func:`fit_line` is the one fit: the theory's cost model
(:func:`specdec.teach.theory.cost_model`, from traced rounds), the tree shape, the benchmarks and
the notebooks fit the line there. What each passes in (every traced round, or one time per L) is
the caller's choice and is said where it is made.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass

# The estimator time_forward reports for each L, as the benchmark JSON names it.
ESTIMATOR = "minimum"


@dataclass(frozen=True)
class Timed:
    """One thing to time: ``rewind()`` puts it back to its context, ``forward(L)`` runs L new rows
    after it, and ``clock()`` reads seconds once the device's queued work is done."""

    rewind: Callable[[], object]
    forward: Callable[[int], object]
    clock: Callable[[], float] = time.perf_counter


def fastest_ms(runs: Mapping[Hashable, Timed], rows: Sequence[int], reps: int) -> dict[Hashable, dict[int, float]]:
    """{run: {L: ms}}: the fastest of ``reps`` calls of each run's ``forward(L)``, each right after
    its ``rewind()``, read on its clock.

    The estimator is the minimum (:data:`ESTIMATOR`): on a shared machine another process, a page
    fault or a preempted thread only ever adds time to a forward, never takes it away, so the
    fastest call is the closest to the forward's own cost, and it stays put when the machine is busy
    while a median moves with the load. Every number timed here is therefore a quiet machine's.

    Each repetition sweeps every run at every L in turn, so a change in the machine's load meets them
    alike; the first sweep only warms up (the allocator, the kernels' choices, a CUDA graph's capture)
    and is not counted."""
    if reps < 1:
        raise ValueError(f"reps must be at least 1 (got {reps})")
    best = {key: dict.fromkeys(rows, float("inf")) for key in runs}
    for rep in range(reps + 1):
        for key, run in runs.items():
            for n in rows:
                run.rewind()
                t0 = run.clock()
                run.forward(n)
                took = run.clock() - t0
                if rep:
                    best[key][n] = min(best[key][n], took)
    return {key: {n: 1e3 * s for n, s in ms.items()} for key, ms in best.items()}


def filler_ids(vocab: int, n: int) -> list[int]:
    """``n`` token ids that stand for a context and the rows after it (a forward's cost depends on
    how many tokens it reads, not on which): every forward timed here reads these."""
    return [(1000 + i) % vocab for i in range(n)]


def time_forwards(models: Mapping[Hashable, object], rows: Sequence[int], context: int, reps: int, *,
                  vocab: int | None = None, attention: Callable[[int], object] | None = None
                  ) -> dict[Hashable, dict[int, float]]:
    """{name: {L: ms}}: :func:`time_forward` for several models at once, every model loaded and
    their forwards timed in turn (:func:`fastest_ms`), so that a change in the machine's load meets
    them alike."""
    # imported here: the theory reads fit_line without loading torch
    from specdec.model.devices import Clock
    from specdec.model.lm import CachedLM

    vocab = vocab or min(model.config.vocab_size for model in models.values())
    ids = filler_ids(vocab, context + max(rows))
    trees = {n: attention(n) for n in rows} if attention else {}
    runs = {}
    for name, model in models.items():
        lm = CachedLM(model, vocab)
        lm.prefill(ids[:context])

        def forward(n: int, lm=lm):
            rows_ids = ids[context:context + n]
            return lm.forward_tree(rows_ids, trees[n]) if trees else lm.forward(rows_ids, keep=n)
        # back to the context's entries through the cache API, outside the timed call
        runs[name] = Timed(lambda lm=lm: lm.rollback(ids[:context + 1]), forward, Clock(lm.device))
    return fastest_ms(runs, rows, reps)


def time_forward(model, rows: Sequence[int], context: int, reps: int, *, vocab: int | None = None,
                 attention: Callable[[int], object] | None = None) -> dict[int, float]:
    """{L: ms} for each L in ``rows``: one forward of ``model`` (through
    :class:`~specdec.model.lm.CachedLM`, as the engine runs it) over L new rows after ``context``
    cached tokens, keeping the logits of all L rows as a verification does; the fastest of ``reps``
    (:func:`fastest_ms` says why), the device synchronised around each timed call
    (:class:`~specdec.model.devices.Clock`). ``vocab``: the rows of the output kept (default: the
    model's); ``attention(L)``: the rows' :class:`~specdec.model.qwen2.TreeAttention` when they are a
    token tree (the lean forward only), else they are a chain."""
    return time_forwards({None: model}, rows, context, reps, vocab=vocab, attention=attention)[None]


def fit_line(rows: Sequence[float], times: Sequence[float]) -> tuple[float, float]:
    """(t_f, t_r): ordinary least squares of ``times`` on ``rows`` over every point given (rows may
    repeat), in the unit of ``times``. Where the rows do not vary the slope is unknowable: t_r = 0 and
    t_f is the mean. Nothing is clipped: a negative part is what the points say (noise, on a busy
    machine), and the caller decides what to do with it."""
    if len(rows) != len(times) or not rows:
        raise ValueError(f"fit_line needs as many rows as times, at least one (got {len(rows)} and {len(times)})")
    n = len(rows)
    mx, my = sum(rows) / n, sum(times) / n
    sxx = sum((x - mx) ** 2 for x in rows)
    slope = sum((x - mx) * (y - my) for x, y in zip(rows, times)) / sxx if sxx else 0.0
    return my - slope * mx, slope
