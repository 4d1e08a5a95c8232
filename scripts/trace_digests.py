"""Digests of seeded CPU traces on tiny models: every drafter (model, hybrid, lookup, none, tree),
T = 0 and T > 0, several K and seeds. A refactor that claims "behaviour unchanged" must leave
every digest as it was (timings excluded: they are the only field that may move).

    python scripts/trace_digests.py > before.json   # on the old commit
    python scripts/trace_digests.py --against before.json
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import torch

# this checkout's packages first, ahead of whichever checkout the environment has installed
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import tiny_pair as tiny  # noqa: E402
from specdec.decode.engine import Generation  # noqa: E402
from specdec.decode.start import make_drafter  # noqa: E402
from specdec.options import DecodeConfig, SamplingConfig  # noqa: E402

TIMING = ("times", "elapsed")


def digest(gen: Generation) -> str:
    rounds = [{k: v for k, v in r.to_dict().items() if k not in TIMING} for r in gen.rounds]
    blob = json.dumps({"tokens": gen.token_ids, "text": gen.text, "stop": gen.stop_reason, "rounds": rounds},
                      sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def runs():
    torch.set_num_threads(1)
    target = tiny.lean(tiny.model(0, scale=3.0))
    draft = tiny.lean(tiny.noisy_copy(tiny.model(0, scale=3.0), 1, 0.3))
    pair = tiny.pair(target, draft)
    for drafter in ("model", "hybrid", "lookup", "none", "tree"):
        shapes = [(2, 6), (3, 8), (1, 4)] if drafter == "tree" else [(0, 0)]
        for (w, n) in shapes:
            for temperature in (0.0, 0.8):
                for k in (1, 4):
                    for seed in (0, 1):
                        cfg = DecodeConfig(k=k, max_new_tokens=24, seed=seed, tree_width=w, tree_nodes=n,
                                           sampling=SamplingConfig(temperature=temperature))
                        prompt = tiny.prompt_ids(8, seed)
                        prompt = prompt + prompt[:4]  # a repeat, so prompt lookup finds matches
                        d = make_drafter(drafter, pair, tree=(w, n), cfg=cfg)
                        gen = Generation(pair, prompt, cfg, d).run()
                        yield f"{drafter} W{w} N{n} T{temperature} K{k} seed{seed}", digest(gen)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--against", type=Path)
    args = ap.parse_args()
    now = dict(runs())
    if args.against is None:
        print(json.dumps(now, indent=1))
        return
    before = json.loads(args.against.read_text())
    moved = [k for k in before if now.get(k) != before[k]]
    print(f"{len(before) - len(moved)}/{len(before)} identical")
    for k in moved:
        print("moved:", k)
    sys.exit(1 if moved else 0)


if __name__ == "__main__":
    main()
