#!/usr/bin/env bash
# A headless Chromium for the browser tests. Prefer one already on the machine (Debian's
# chromium, or Google Chrome on a Mac); on Debian/Ubuntu install the distribution package;
# otherwise let Playwright fetch its own build.
set -euo pipefail
for b in "${CHROMIUM:-}" /usr/bin/chromium /usr/bin/chromium-browser \
         "/Applications/Google Chrome.app/Contents/MacOS/Google Chrome"; do
  [ -n "$b" ] && [ -x "$b" ] && { echo "browser: $b"; exit 0; }
done
if command -v apt-get >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
  echo "browser: /usr/bin/chromium"
else
  .venv/bin/python -m playwright install chromium
fi
