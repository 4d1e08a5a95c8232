"""Take the README's screenshot (docs/app.png): the app on the embedded pair after a short run.

    .venv/bin/python scripts/screenshot.py [--out docs/app.png] [--max-new-tokens 40]

Launches the app in this process on a free localhost port and drives headless Chromium
(env CHROMIUM, else /usr/bin/chromium, else Playwright's own build).
"""
from __future__ import annotations

import argparse
import os
import socket
import sys
from pathlib import Path

from playwright.sync_api import expect, sync_playwright

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import app  # noqa: E402
import app_handlers as h  # noqa: E402
from specdec import DEFAULT_DRAFT, DEFAULT_TARGET  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "app.png")
    parser.add_argument("--max-new-tokens", type=int, default=40)
    parser.add_argument("--precision", default="auto")
    args = parser.parse_args()
    loader = h.Loader(DEFAULT_TARGET, DEFAULT_DRAFT, "auto", args.precision).start()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    demo = app.build_demo(loader)
    app.launch(demo, port=port, prevent_thread_lock=True, quiet=True)
    chromium = next((p for p in (os.environ.get("CHROMIUM"), "/usr/bin/chromium") if p and Path(p).is_file()), None)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=["--headless", "--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            expect.set_options(timeout=600_000)
            page.goto(f"http://127.0.0.1:{port}")
            page.get_by_role("tab", name="Run the whole generation").click()
            expect(page.get_by_role("button", name="Run", exact=True)).to_be_enabled()
            page.get_by_label("Max new tokens").fill(str(args.max_new_tokens))
            page.get_by_role("button", name="Run", exact=True).click()
            expect(page.get_by_text("Finished (")).to_be_visible()
            page.wait_for_timeout(1000)  # let the last plot redraw
            args.out.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=args.out, full_page=True)
            browser.close()
    finally:
        demo.close()
    print(f"wrote {args.out} ({args.out.stat().st_size // 1024} KB)")


if __name__ == "__main__":
    main()
