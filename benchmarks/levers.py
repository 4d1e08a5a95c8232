"""What each speed lever does on this machine: the cost of one forward of the embedded verifier
and draft, by representation, forward implementation (lean vs transformers'), batch invariance
and draft output rows, at 1 row (decoding) and K+1 rows (verifying). Writes JSON for the README.

    python -m benchmarks.levers
"""
from __future__ import annotations

import argparse
import gc
import statistics
import sys

import torch

from benchmarks.common import ROOT, environment, write_json
from benchmarks.profile import CONTEXT, forward_times
from specdec.embedded import DEFAULT_DRAFT, DEFAULT_TARGET, EMBEDDED, cache_root
from specdec.models import load_model, load_pair
from specdec.precision import Precision, choose, cpu_candidates

ROWS = (1, 2, 3, 5, 7)


def forward_ms(model, vocab: int, reps: int = 7) -> list[float]:
    """Median ms of one forward of each row count in ROWS after a CONTEXT-token cache: the same
    measurement as the profile's forward-cost fit (``benchmarks.profile.forward_times``)."""
    return [statistics.median(s) * 1e3 for s in forward_times(model, vocab, list(ROWS), reps)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    cpu = torch.device("cpu")
    pair = load_pair(device="cpu")          # for the environment record and the vocabulary
    env, vocab = environment(pair), pair.vocab_size
    del pair
    results = {}

    def measure(label, name, precision: Precision, role, **kw):
        model, _ = load_model(name, cpu, precision, role, **kw)
        results[label] = forward_ms(model, vocab)
        print(f"{label:60s} " + " ".join(f"{x:7.1f}" for x in results[label]), file=sys.stderr, flush=True)
        del model
        gc.collect()

    for name in cpu_candidates():
        measure(f"verifier, lean forward, {name}", DEFAULT_TARGET, choose(cpu, name), "target")
    int8 = choose(cpu, "int8") if "int8" in cpu_candidates() else choose(cpu, "float32")
    directory = str(cache_root() / EMBEDDED[DEFAULT_TARGET].sha256[:16] / "converted-float32")
    measure(f"verifier, transformers' forward, {int8.name}", directory, int8, "target")
    measure(f"draft, lean forward, {int8.name}, batch-invariant (as a verifier)", DEFAULT_DRAFT, int8, "target")
    measure(f"draft, lean forward, {int8.name} (default)", DEFAULT_DRAFT, int8, "draft")
    measure(f"draft, lean forward, {int8.name}, output layer cut to 32768 ids", DEFAULT_DRAFT, int8, "draft",
            draft_vocab=32768)
    out = args.out or ROOT / "benchmarks" / "results" / f"levers-{env['cpu_slug']}.json"
    write_json(out, {"benchmark": "levers", **env, "rows": list(ROWS), "context": CONTEXT, "forward_ms": results})
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
