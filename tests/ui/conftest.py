"""The model loaders the app's tests without a browser share: the app's Loader on tiny random models
(``pair`` is the unrelated draft of tests/conftest.py), a close draft, and a lean pair for trees."""
from __future__ import annotations

import pytest
from helpers import tiny

from specdec import ModelChoice
from specdec_ui.state import Loader


@pytest.fixture()
def loader(pair):
    return Loader(ModelChoice.of(pair), pair)


@pytest.fixture(scope="module")
def close_loader():
    """A draft close to the verifier (a noisy copy): most rounds keep every draft."""
    m = tiny.model(1, scale=4)
    pair = tiny.pair(m, tiny.noisy_copy(m, 1, 0.3))
    return Loader(ModelChoice.of(pair), pair)


@pytest.fixture(scope="module")
def tree_loader():
    """The tree drafter needs the lean forward: a verifier and a noisy copy of it as the draft."""
    hf = tiny.model(0, scale=4)
    pair = tiny.pair(tiny.lean(hf), tiny.lean(tiny.noisy_copy(hf, 1, 0.3), batch_invariant=False))
    return Loader(ModelChoice.of(pair), pair)
