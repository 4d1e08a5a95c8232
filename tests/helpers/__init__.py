"""What the tests share, and nothing else imports: tiny random models of the real architecture
(:mod:`.tiny`) and a tiny GGUF of the embedded format (:mod:`.tiny_gguf`), greedy references and a
scripted drafter (:mod:`.scripted`), a float32 reference forward streamed a layer at a time
(:mod:`.reference`), the app's handlers as the page calls them (:mod:`.ui`), the notebook renderer
(:mod:`.notebooks`) and the browser's page helpers (:mod:`.browser`). No test file imports another
test file; this package is on the path by ``pythonpath`` in pyproject.toml."""
from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The precision every real-model test uses (default: what this machine would pick); one load serves
# the CLI, engine and browser tests alike.
REAL_PRECISION = os.environ.get("SPECDEC_TEST_PRECISION", "auto")
