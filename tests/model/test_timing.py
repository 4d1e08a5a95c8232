"""The one timer of a forward (:func:`specdec.model.timing.time_forward`) on a tiny model with a
scripted clock: what it reports is the minimum of the timed calls, the warm-up sweep left out, and
every timed forward starts from the same context. Nothing here reads a real clock."""
from __future__ import annotations

import pytest
from helpers import tiny

import specdec.model.devices
from specdec.decode.tree import verifier_attention
from specdec.model import timing
from specdec.model.lm import CachedLM

CONTEXT = 10
ROWS = [1, 3]
# seconds each forward takes on the scripted clock, sweep by sweep (the first is the warm-up, the
# fastest of all: it must not count), row count by row count
SCRIPT = [{1: 0.001, 3: 0.001}, {1: 0.010, 3: 0.030}, {1: 0.008, 3: 0.050}, {1: 0.012, 3: 0.026}]


class ScriptedClock:
    """Read twice around each timed forward: the second reading is the first plus the script's
    next duration (sweeps in order, row counts in ROWS order)."""

    def __init__(self, device=None):
        self.now, self.readings = 0.0, 0
        self.durations = iter(d[n] for d in SCRIPT for n in ROWS)

    def __call__(self) -> float:
        if self.readings % 2:
            self.now += next(self.durations)
        self.readings += 1
        return self.now


@pytest.fixture
def fed(monkeypatch):
    """(model, cache length before, rows fed) of every forward a CachedLM runs, chain or tree."""
    calls = []
    for name in ("forward", "forward_tree"):
        original = getattr(CachedLM, name)

        def spy(self, ids, *args, original=original, **kwargs):
            calls.append((self.model, len(self), len(ids)))
            return original(self, ids, *args, **kwargs)
        monkeypatch.setattr(CachedLM, name, spy)
    monkeypatch.setattr(specdec.model.devices, "Clock", ScriptedClock)
    return calls


def binary_tree(n: int):
    return verifier_attention(tuple([-1] + [(j - 1) // 2 for j in range(1, n)]), CONTEXT)


@pytest.mark.parametrize("attention", [None, binary_tree], ids=["chain", "tree"])
def test_time_forward_reports_the_fastest_timed_call_after_the_same_context(fed, attention):
    model = tiny.lean(tiny.model(0))
    ms = timing.time_forward(model, ROWS, CONTEXT, reps=len(SCRIPT) - 1, vocab=tiny.V, attention=attention)
    # the minimum of sweeps 1.. per row count: neither the warm-up's 1 ms nor a median (10, 30) or a mean
    assert ms == {1: pytest.approx(8.0), 3: pytest.approx(26.0)}
    assert timing.ESTIMATOR == "minimum"
    prefill, *timed = fed
    assert prefill == (model, 0, CONTEXT)
    assert timed == [(model, CONTEXT, n) for _ in SCRIPT for n in ROWS]  # rewound to the context before each


def test_time_forwards_times_the_models_in_turn_each_on_its_own_clock(fed):
    models = {"a": tiny.lean(tiny.model(0)), "b": tiny.lean(tiny.model(1))}
    ms = timing.time_forwards(models, ROWS, CONTEXT, reps=len(SCRIPT) - 1, vocab=tiny.V)
    assert ms == {name: {1: pytest.approx(8.0), 3: pytest.approx(26.0)} for name in models}
    # both prefilled, then every sweep runs a's row counts, then b's
    assert fed[:2] == [(m, 0, CONTEXT) for m in models.values()]
    assert fed[2:] == [(m, CONTEXT, n) for _ in SCRIPT for m in models.values() for n in ROWS]


def test_fastest_ms_needs_a_timed_call():
    with pytest.raises(ValueError, match="reps must be at least 1"):
        timing.fastest_ms({}, ROWS, 0)
