"""The one cost fit: a forward over L rows costs t(L) = t_f + t_r·L (names: docs/notation.md).

t_f is the fixed part (reading the weights once), t_r the cost of each extra row (its compute). Every
consumer fits the line here: the theory's cost model (:func:`specdec.teach.theory.cost_model`, from traced
rounds), the tree shape's per-machine costs (:mod:`specdec.decode.tree_shape`), the benchmarks
(``benchmarks/profile.py``) and the notebooks. What each passes in (every traced round, or one
summary per L of repeated timings) is the caller's choice and is said where it is made.
"""
from __future__ import annotations

from collections.abc import Sequence


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
