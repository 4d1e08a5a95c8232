"""The one place that finds a Chromium for the browser tests, the screenshot script and the
benchmarks' PNG export (kaleido).

    python -m benchmarks.chromium            # print the browser that will be used
    python -m benchmarks.chromium --ensure   # install one if none is found (make test does this)

Looks for ``$CHROMIUM``, then Debian/Ubuntu's chromium, Google Chrome on Linux, then Chrome or
Chromium on macOS. ``--ensure`` installs Debian's ``chromium`` with apt-get where there is one,
and otherwise lets Playwright download its own build (then ``find_chromium`` returns None and
Playwright uses that build).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

CANDIDATES = ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome",
              "/usr/bin/google-chrome-stable", "/Applications/Google Chrome.app/Contents/MacOS/Google Chrome",
              "/Applications/Chromium.app/Contents/MacOS/Chromium")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run")


def find_chromium() -> str | None:
    for path in (os.environ.get("CHROMIUM"), *CANDIDATES):
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def launch(playwright):
    """A headless Chromium from a ``sync_playwright()`` context."""
    return playwright.chromium.launch(executable_path=find_chromium(), args=list(FLAGS))


def ensure() -> str:
    found = find_chromium()
    if found:
        return found
    if shutil.which("apt-get"):
        sudo = [] if os.geteuid() == 0 else ["sudo"]
        subprocess.run([*sudo, "apt-get", "update", "-qq"], check=True)
        subprocess.run([*sudo, "apt-get", "install", "-y", "-qq", "chromium"], check=True,
                       env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"}, stdout=subprocess.DEVNULL)
        found = find_chromium()
        if found:
            return found
    subprocess.run([sys.executable, "-m", "playwright", "install", "chromium"], check=True)
    return "Playwright's own Chromium"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    print("browser:", ensure() if "--ensure" in argv else find_chromium() or "none found (run with --ensure)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
