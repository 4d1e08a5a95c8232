"""Command line: ``python -m specdec generate|compare|race|cache``.

With ``--json`` stdout holds exactly one JSON object; progress and logs go to stderr. User
mistakes exit with status 2 and a one-line ``error: ...`` naming the field, never a traceback.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace

from specdec.decode.engine import Generation
from specdec.decode.registry import DRAFTERS, MODEL, VERIFIER_ONLY
from specdec.decode.sampling import NumericalError
from specdec.decode.settings import (
    ModelChoice,
    RunSettings,
    add_run_arguments,
    settings_from_args,
)
from specdec.decode.start import start
from specdec.options import ConfigError
from specdec.teach.exactness import explain, how_exact
from specdec.teach.race import RACERS, race
from specdec.teach.render import first_difference
from specdec.trace import TraceFile
from specdec.weights.errors import ModelLoadError


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    add_run_arguments(common)
    common.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    parser = argparse.ArgumentParser(prog="python -m specdec", description="Speculative decoding, traced.")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("generate", parents=[common], help="speculative decoding with a per-round trace")
    sub.add_parser("compare", parents=[common], help="verifier-only vs speculative on the same settings")
    race = sub.add_parser("race", parents=[common], help="every drafter on one prompt and verifier, the same settings "
                          "(specdec.teach.race): tokens per round, a, c, decode tok/s, speed-up, identical output")
    race.add_argument("--drafters", default=",".join(RACERS),
                      help=f"comma-separated drafters to race after verifier-only (default: {','.join(RACERS)})")
    cache = sub.add_parser("cache", help="show what the on-disk cache holds, or clear it")
    cache.add_argument("action", nargs="?", choices=["show", "clear"], default="show")
    cache.add_argument("--all", action="store_true", help="with clear: also the kernel timings and llama.cpp build")
    return parser


def _result(gen: Generation) -> dict:
    return {"text": gen.text, "token_ids": gen.token_ids, "stop_reason": gen.stop_reason,
            "summary": gen.summary().to_dict()}


def _line(name: str, s: dict) -> str:
    line = f"{name}: {s['new_tokens']} tokens in {s['wall_s']:.2f} s = {s['tokens_per_s']:.2f} tok/s, " \
           f"{s['target_forwards']} verifier forwards"
    if s["drafted"]:
        line += f", acceptance {s['acceptance_rate']:.1%}, {s['mean_tokens_per_round']:.2f} tokens/round"
    return line


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "cache":
        from specdec.weights import store
        if args.action == "clear":
            print(f"removed {store.clear(args.all) / 1e9:.3f} GB")
        print(store.show())
        return 0
    log = lambda f, m: print(f"[{f:4.0%}] {m}", file=sys.stderr, flush=True)  # noqa: E731
    try:
        asked = settings_from_args(args)
        racers = tuple(d.strip() for d in args.drafters.split(",") if d.strip()) if args.command == "race" else ()
        if args.command == "race" and (not racers or any(d not in DRAFTERS for d in racers)):
            raise ConfigError(f"drafters must be a comma-separated list of {', '.join(DRAFTERS)} "
                              f"(got {args.drafters!r})", "drafters")
        pair = asked.models.load(progress=log, drafter=MODEL.name if args.command == "race" else asked.drafter)
        print(f"precision {pair.precision.reason}", file=sys.stderr)
        if pair.draft_precision is not None:
            print(f"draft precision {pair.draft_precision.reason}", file=sys.stderr)
        print(f"greedy output equals verifier-only: {how_exact(pair)}", file=sys.stderr)
        # the record names what actually ran: the resolved device, precision and tree shape, not "auto"
        settings = RunSettings(asked.prompt, asked.drafter, asked.decode, ModelChoice.of(pair), asked.chat_template)

        def run(drafter: str) -> Generation:
            gen = start(pair, settings.prompt, settings.decode, drafter, settings.chat_template)
            if gen.tree_shape:
                print(f"tree shape {gen.tree_shape}", file=sys.stderr)
            return gen.run()

        if args.command == "race":
            result = race(pair, settings.prompt, settings.decode, racers, settings.chat_template, progress=log)
            print(json.dumps(result.to_dict()) if args.json else result.table())
            return 0
        if args.command == "generate":
            gen = run(settings.drafter)
            settings = replace(settings, decode=gen.cfg)
            if args.json:
                print(TraceFile(settings.to_dict(), tuple(gen.rounds), gen.prefill_s, gen.text,
                                gen.stop_reason).to_json())
            else:
                print(gen.text)
                name = VERIFIER_ONLY.label if settings.drafter == VERIFIER_ONLY.name else "speculative"
                print("\n" + _line(name, gen.summary().to_dict()), file=sys.stderr)
            return 0
        base, spec = run(VERIFIER_ONLY.name), run(settings.drafter)
        settings = replace(settings, decode=spec.cfg)
        b, s = base.summary(), spec.summary()
        out = {"settings": settings.to_dict(), "baseline": _result(base), "speculative": _result(spec),
               "speedup": s.tokens_per_s / b.tokens_per_s if b.tokens_per_s else 0.0,
               "identical": base.token_ids == spec.token_ids,
               "first_difference": first_difference(base.token_ids, spec.token_ids)}
        # at T = 0 a difference is explained, never silent: a near-tie of the verifier's logits, or a bug
        diff = explain(pair, base.prompt_ids, base.token_ids, spec.token_ids) if settings.decode.sampling.greedy else None
        out["difference"] = None if diff is None else diff.to_dict()
        if args.json:
            print(json.dumps(out))
        else:
            print(f"--- verifier only ---\n{base.text}\n--- speculative ---\n{spec.text}\n---")
            print(_line(VERIFIER_ONLY.label, out["baseline"]["summary"]))
            print(_line("speculative", out["speculative"]["summary"]))
            print(f"speedup {out['speedup']:.2f}x; identical output: {out['identical']}"
                  + ("" if settings.decode.sampling.greedy else " (sampling: outputs differ by design)"))
            if diff is not None:
                print(diff.sentence(pair.token_text))
        return 0
    except (ConfigError, ModelLoadError, NumericalError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
