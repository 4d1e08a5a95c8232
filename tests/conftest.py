"""Shared fixtures. The real embedded pair is loaded once per test session (never in parallel)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

ARTIFACTS = ROOT / "test-artifacts"
# The dtype every real-model test uses; one load serves the CLI, engine and browser tests alike.
REAL_DTYPE = os.environ.get("SPECDEC_TEST_DTYPE", "float32")


@pytest.fixture(scope="session")
def real_pair():
    from specdec import load_pair
    return load_pair(dtype=REAL_DTYPE, device="cpu")


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS
