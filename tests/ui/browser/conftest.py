"""The browser tier's fixtures: the app launched once per module on the session's real pair, and
headless Chromium found by :mod:`benchmarks.chromium`."""
from __future__ import annotations

import pytest
from helpers.browser import LAPTOP, free_port, open_app  # noqa: F401
from playwright import sync_api

from benchmarks import chromium
from specdec import ModelChoice
from specdec_ui.page import build_demo, launch
from specdec_ui.state import Loader


@pytest.fixture(scope="module")
def url(real_pair):
    loader = Loader(ModelChoice.of(real_pair)).load_in_background().wait()
    assert loader.pair is real_pair  # the memoised pair: no second load
    port = free_port()
    demo = build_demo(loader)
    launch(demo, port=port, prevent_thread_lock=True, quiet=True)
    yield f"http://127.0.0.1:{port}"
    demo.close()


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:
        b = chromium.launch(p)
        yield b
        b.close()


@pytest.fixture()
def page(browser, url):
    pg = open_app(browser, url)
    yield pg
    pg.context.close()

