"""Tier 2 for the header's model form: the launched app with the embedded pair in headless Chromium,
by role and label, with the fixtures of ``test_app_browser``. A path that does not exist is refused
at the Verifier field with the loader's message, and the embedded pair is back and working; no
second pair is loaded. Screenshots of the open form, at 1280x800 and at 400 px, go to test-artifacts/."""
from __future__ import annotations

import re

import pytest
from helpers.browser import PHONE, expect, open_app, status

pytestmark = [pytest.mark.browser, pytest.mark.real]

MISSING = "/no/such/model.gguf"


def open_models(pg):
    pg.get_by_role("button", name=re.compile("Models, precision and parameter counts")).click()
    verifier = pg.get_by_role("textbox", name="Verifier")
    expect(verifier).to_be_visible()
    return verifier


def test_a_missing_model_file_is_answered_at_its_field_and_the_app_keeps_working(browser, url, artifacts):
    pg = open_app(browser, url)
    verifier = open_models(pg)
    expect(verifier).to_have_value("embedded:qwen2.5-coder-1.5b-instruct")
    expect(pg.get_by_role("textbox", name="Draft")).to_have_value("embedded:qwen2.5-coder-0.5b-instruct")
    pg.screenshot(path=artifacts / "app-models-1280x800.png", full_page=True)
    verifier.fill(MISSING)
    pg.get_by_role("button", name="Load these models").click()
    message = f"Verifier: cannot load '{MISSING}': not an embedded model, a local directory or .gguf file"
    expect(pg.locator(".spec-alert").get_by_text(re.compile(re.escape(message)))).to_be_visible()
    expect(pg.locator(".field-error").get_by_text(re.compile(re.escape(message)))).to_be_visible()
    expect(verifier).to_have_value(MISSING)  # what was typed stays, to be corrected
    pg.screenshot(path=artifacts / "app-models-refused-1280x800.png", full_page=True)
    # the embedded pair is back: the buttons work again and a round runs on it
    expect(pg.get_by_text(re.compile(r"Ready: qwen2\.5-coder-1\.5b-instruct verifier"))).to_be_visible()
    pg.get_by_role("button", name="Step round").click()
    expect(status(pg, "Round 1: drafted, verified, decided and committed.")).to_be_visible()
    pg.context.close()


def test_the_open_model_form_fits_a_phone(browser, url, artifacts):
    pg = open_app(browser, url, PHONE)
    open_models(pg)
    expect(pg.get_by_role("button", name="Back to the embedded pair")).to_be_visible()
    assert pg.evaluate("() => document.documentElement.scrollWidth") <= PHONE["width"]
    pg.screenshot(path=artifacts / "app-models-400.png", full_page=True)
    pg.context.close()
