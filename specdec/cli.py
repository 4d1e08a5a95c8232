"""Command line: ``python -m specdec generate|compare``.

With ``--json`` stdout holds exactly one JSON object; progress and logs go to stderr. User
mistakes exit with status 2 and a one-line ``error: ...`` naming the field, never a traceback.
"""
from __future__ import annotations

import argparse
import json
import sys

from .config import ConfigError, GenerationConfig, SamplingConfig, validate_prompt
from .engine import DRAFTERS, Generation, start
from .models import DEFAULT_DRAFT, DEFAULT_TARGET, ModelLoadError, load_pair
from .precision import PRECISIONS
from .render import first_difference, trace_json


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--prompt", required=True, help="the user prompt")
    common.add_argument("--draft", default=DEFAULT_DRAFT, help=f"draft model (default {DEFAULT_DRAFT})")
    common.add_argument("--target", default=DEFAULT_TARGET, help=f"verifier model (default {DEFAULT_TARGET})")
    common.add_argument("--drafter", default="model", choices=DRAFTERS, help="who drafts (default model)")
    defaults = GenerationConfig()
    common.add_argument("--k", type=int, default=defaults.k,
                        help=f"most drafted tokens per round, 1..32 (default {defaults.k})")
    common.add_argument("--confidence", type=float, default=defaults.confidence,
                        help="stop drafting after a token the draft gives less than this probability; "
                             f"0 = always K (default {defaults.confidence})")
    common.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default 0)")
    common.add_argument("--top-k", type=int, default=0, help="0 disables (default 0)")
    common.add_argument("--top-p", type=float, default=1.0, help="in (0, 1] (default 1.0)")
    common.add_argument("--seed", type=int, default=0)
    common.add_argument("--max-new-tokens", type=int, default=64)
    common.add_argument("--device", default="auto", help="auto (MPS, then CUDA, then CPU), cpu, cuda or mps")
    common.add_argument("--precision", default="auto",
                        help=f"weights and kernels: {', '.join(PRECISIONS)} (default auto: measured per machine)")
    common.add_argument("--no-chat-template", action="store_true", help="feed the prompt raw")
    common.add_argument("--sync-timing", action="store_true", help="synchronise the device around each phase")
    common.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    parser = argparse.ArgumentParser(prog="python -m specdec", description="Speculative decoding, traced.")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("generate", parents=[common], help="speculative decoding with a per-round trace")
    sub.add_parser("compare", parents=[common], help="verifier-only vs speculative on the same settings")
    return parser


def _config(args) -> GenerationConfig:
    return GenerationConfig(max_new_tokens=args.max_new_tokens, k=args.k, confidence=args.confidence, seed=args.seed,
                            sync_timing=args.sync_timing,
                            sampling=SamplingConfig(args.temperature, args.top_k, args.top_p))


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
    log = lambda f, m: print(f"[{f:4.0%}] {m}", file=sys.stderr, flush=True)  # noqa: E731
    try:
        cfg = _config(args)
        validate_prompt(args.prompt)
        pair = load_pair(args.target, args.draft if args.drafter == "model" else None,
                         args.device, args.precision, progress=log, k=cfg.k)
        print(f"precision {pair.precision.reason}", file=sys.stderr)
        settings = {"target": args.target, "draft": args.draft if args.drafter == "model" else None,
                    "drafter": args.drafter, "k": cfg.k, "confidence": cfg.confidence, "temperature": cfg.sampling.temperature,
                    "top_k": cfg.sampling.top_k, "top_p": cfg.sampling.top_p, "seed": cfg.seed,
                    "max_new_tokens": cfg.max_new_tokens, "device": str(pair.device),
                    "precision": pair.precision.name, "chat_template": not args.no_chat_template}
        chat = not args.no_chat_template
        if args.command == "generate":
            gen = start(pair, args.prompt, cfg, args.drafter, chat).run()
            if args.json:
                print(trace_json(settings, gen.rounds, gen.prefill_s, gen.text, gen.stop_reason))
            else:
                print(gen.text)
                print("\n" + _line("speculative", gen.summary().to_dict()), file=sys.stderr)
            return 0
        base = start(pair, args.prompt, cfg, "none", chat).run()
        spec = start(pair, args.prompt, cfg, args.drafter, chat).run()
        b, s = base.summary(), spec.summary()
        out = {"settings": settings, "baseline": _result(base), "speculative": _result(spec),
               "speedup": s.tokens_per_s / b.tokens_per_s if b.tokens_per_s else 0.0,
               "identical": base.token_ids == spec.token_ids,
               "first_difference": first_difference(base.token_ids, spec.token_ids)}
        if args.json:
            print(json.dumps(out))
        else:
            print(f"--- verifier only ---\n{base.text}\n--- speculative ---\n{spec.text}\n---")
            print(_line("verifier only", out["baseline"]["summary"]))
            print(_line("speculative", out["speculative"]["summary"]))
            print(f"speedup {out['speedup']:.2f}x; identical output: {out['identical']}"
                  + ("" if cfg.sampling.greedy else " (sampling: outputs differ by design)"))
        return 0
    except (ConfigError, ModelLoadError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
