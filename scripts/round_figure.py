"""Draw the README's figure of one round (docs/round.svg): a real round of the embedded pair at temperature
0.8, K = 4, the first over seeds 0, 1, ... that keeps a draft and then rejects one the draft gave q >= 0.5
(the round notebook 02 reads), after Commit and roll back.

    .venv/bin/python scripts/round_figure.py [--out docs/round.svg] [--phase commit] [--prompt TEXT]

The app's Step through tab downloads the same figure for any round on show ("Download this round").
"""
from __future__ import annotations

import argparse

from specdec import (
    DecodeConfig,
    ModelChoice,
    RunSettings,
    SamplingConfig,
    load_pair,
    save_round_figure,
)
from specdec.decode.start import start
from specdec.teach.figure import generation_context
from specdec.teach.render import STEP_NAMES

PROMPT = "Write a Python function that returns the n-th Fibonacci number."


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="docs/round.svg")
    parser.add_argument("--phase", default="commit", choices=list(STEP_NAMES))
    parser.add_argument("--prompt", default=PROMPT)
    args = parser.parse_args(argv)
    pair = load_pair(device="cpu")
    for seed in range(10):
        cfg = DecodeConfig(max_new_tokens=32, k=4, confidence=0.0, seed=seed, sampling=SamplingConfig(0.8))
        gen = start(pair, args.prompt, cfg, drafter="model")
        r = next((r for r in gen if r.rejected_at is not None and r.rejected_at >= 1
                  and r.positions[r.rejected_at].q >= 0.5), None)
        if r is not None:
            break
    else:
        parser.error("no round over seeds 0-9 kept a draft and then rejected one with q >= 0.5")
    settings = RunSettings(prompt=args.prompt, drafter="model", decode=cfg, models=ModelChoice.of(pair))
    path = save_round_figure(r, args.out, args.phase, settings=settings, context=generation_context(gen, r),
                             previous=gen.rounds[r.index - 1] if r.index else None)
    print(f"{path}: seed {seed}, round {r.index + 1}, after {STEP_NAMES[args.phase]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
