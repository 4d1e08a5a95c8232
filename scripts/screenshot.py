"""Take the README's screenshot (docs/app.png): the app on the embedded pair after a short run.

    .venv/bin/python scripts/screenshot.py [--out docs/app.png] [--max-new-tokens 40]

Launches the app in this process on a free localhost port and drives headless Chromium (found
by ``benchmarks.chromium``, the same lookup the tests use).
"""
from __future__ import annotations

import argparse
import re
import socket
from pathlib import Path

from playwright.sync_api import expect, sync_playwright

from benchmarks import chromium as browser
from specdec import ModelChoice
from specdec_ui.page import build_demo, launch
from specdec_ui.state import Loader

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "app.png")
    parser.add_argument("--max-new-tokens", type=int, default=40)
    parser.add_argument("--precision", default="auto")
    args = parser.parse_args()
    loader = Loader(ModelChoice(precision=args.precision)).load_in_background()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    demo = build_demo(loader)
    launch(demo, port=port, prevent_thread_lock=True, quiet=True)
    try:
        with sync_playwright() as p:
            chromium = browser.launch(p)
            page = chromium.new_page(viewport={"width": 1280, "height": 800})
            expect.set_options(timeout=600_000)
            page.goto(f"http://127.0.0.1:{port}")
            expect(page.get_by_text(re.compile(r"^Ready: "))).to_be_visible()  # as a learner waits for the models
            page.get_by_role("tab", name="Run").click()
            expect(page.get_by_role("button", name="Run", exact=True)).to_be_enabled()
            page.get_by_label("Temperature (0 = greedy)").fill("0.7")  # sampled: every kind of token shows
            page.get_by_label("Max new tokens").fill(str(args.max_new_tokens))
            page.get_by_role("button", name="Run", exact=True).click()
            expect(page.get_by_text("Finished (")).to_be_visible()
            page.wait_for_timeout(1000)  # let the last plot redraw
            for box in page.locator(".sidebar, .sidebar-content").all():  # the sidebar from its top, as it opens
                box.evaluate("e => { e.scrollTop = 0; }")
            args.out.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=args.out, full_page=True)
            chromium.close()
    finally:
        demo.close()
    print(f"wrote {args.out} ({args.out.stat().st_size // 1024} KB)")


if __name__ == "__main__":
    main()
