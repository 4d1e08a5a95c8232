"""Shared fixtures and the test tiers.

Tiers (markers, see pyproject.toml): unmarked tests use tiny random models and take seconds
(``make test-fast``); ``real`` tests load the embedded pair, once per test session and never in
parallel; ``browser`` tests drive the launched app in headless Chromium; ``gpu`` tests need a CUDA or
MPS device and are skipped, with that reason, without one. A test that asks for the ``real_pair``
fixture is marked ``real`` here, so the fast tier can never load the real models.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import REAL_PRECISION, tiny

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"


NO_GPU = "needs a CUDA or MPS device (none here)"


def _gpu() -> torch.device | None:
    if torch.cuda.is_available():
        return torch.device("cuda")
    return torch.device("mps") if torch.backends.mps.is_available() else None


def pytest_collection_modifyitems(items):
    for item in items:
        if "real_pair" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.real)
        if item.get_closest_marker("gpu") is not None and _gpu() is None:
            item.add_marker(pytest.mark.skip(reason=NO_GPU))
    items.sort(key=lambda item: item.get_closest_marker("alone") is None)  # first, before the pair loads


@pytest.fixture(scope="session")
def gpu_device() -> torch.device:
    """The accelerator ``gpu`` tests run on: CUDA, else MPS."""
    device = _gpu()
    if device is None:
        pytest.skip(NO_GPU)
    return device


@pytest.fixture
def one_thread():
    """Tiny tensors are too small to split: on a loaded 2-core machine each op's thread barrier
    costs more than its work. Use with ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def real_pair():
    from specdec import load_pair
    return load_pair(precision=REAL_PRECISION, device="cpu")


@pytest.fixture(scope="module")
def pair():
    """Two tiny random models, the draft unrelated to the verifier (partial acceptance), per module."""
    return tiny.pair(tiny.model(1, scale=4), tiny.model(2, scale=4))


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS
