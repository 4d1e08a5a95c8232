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
# The precision every real-model test uses (default: what this machine would pick); one load serves
# the CLI, engine and browser tests alike.
REAL_PRECISION = os.environ.get("SPECDEC_TEST_PRECISION", "auto")


@pytest.fixture(scope="session")
def real_pair():
    from specdec import load_pair
    return load_pair(precision=REAL_PRECISION, device="cpu")


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS
