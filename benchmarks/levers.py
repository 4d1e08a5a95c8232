"""What each speed lever does on this machine, measured, for the levers table of docs/results.md.

1. **Forward costs**: one forward of the embedded verifier and draft by representation and
   kernel, forward implementation (lean vs transformers'), batch invariance and draft output rows,
   at 1 row (decoding) and K+1 rows (verifying), each the fastest of its reps
   (:func:`specdec.model.timing.time_forward`; the JSON's ``estimator``, the median in results written
   before it was named). The draft's variants are timed interleaved (round-robin, all loaded at once),
   so this machine's drift hits them alike.
2. **End to end**: speculative decoding with the default verifier and each draft variant (and
   the hybrid drafter, and the draft's sampling path at T = 0 with and without its fast path) on
   held-out code prompts: tok/s, acceptance, tokens per round and draft / verify, the draft phase's
   time per drafted token over the verify phase's time per round (the engine's own trace).
3. ``--compile``: ``torch.compile`` of the draft's layers (inductor), its compile time and
   forward cost against eager.

    python -m benchmarks.levers [--quick] [--compile]
    python -m benchmarks.levers --tiny     # tiny random models: checks the script, measures nothing
"""
from __future__ import annotations

import argparse
import copy
import gc
import sys
import time
from pathlib import Path

import torch

from benchmarks import tiny_pair
from benchmarks.common import cpu_id, environment, write_json
from benchmarks.profile import CONTEXT
from benchmarks.tables import estimator, fmt
from benchmarks.throughput import draft_vs_verify
from specdec import DecodeConfig
from specdec.decode.drafters import ModelDrafter
from specdec.decode.engine import Generation, stop_ids_of
from specdec.decode.start import start
from specdec.model.devices import Clock
from specdec.model.lm import CachedLM
from specdec.model.precision import cpu_variants
from specdec.model.timing import ESTIMATOR, filler_ids, time_forward, time_forwards
from specdec.weights.loading import TRANSFORMERS
from specdec.weights.pairing import ModelPair

ROWS = (1, 2, 3, 5, 7)
CUT, TINY_CUT = 32768, tiny_pair.V // 2  # ids the cut draft output layer scores (plus every special token)
NO_ONE_CALL = "its layers do not run as one call (not all specdec's kernels, or not built here): no twin to time"
PROMPTS = [  # held out: none of them is in the app, the tests or the throughput benchmark
    "Write a Python function that flattens a nested list of arbitrary depth.",
    "Write a Python function that returns the longest common prefix of a list of strings.",
    "Write a Python class for an LRU cache with get and put.",
    "Write a Python function that converts a Roman numeral to an integer.",
]


def forward_ms(model, vocab: int, reps: int = 7) -> list[float]:
    """ms of one forward of each row count in ROWS after a CONTEXT-token cache: the same
    measurement as the profile's forward-cost fit (``benchmarks.profile.forward_costs``)."""
    ms = time_forward(model, ROWS, CONTEXT, reps, vocab=vocab)
    return [ms[n] for n in ROWS]


def interleaved_ms(models: dict, vocab: int, rows: int = 1, reps: int = 25) -> dict[str, float]:
    """ms of one ``rows``-row forward per model, the models timed in turn each repetition."""
    return {name: ms[rows] for name, ms in time_forwards(models, [rows], CONTEXT, reps, vocab=vocab).items()}


def op_by_op(model):
    """The same model (its very weights) with each layer run op by op from Python rather than as one
    C++ call (:meth:`specdec.model.qwen2.LeanQwen2.one_call`): what the one-call layer saves; None
    where its layers do not run as one call, so that the twin would time the very same forward."""
    if not model.one_call:
        return None
    twin = copy.copy(model)
    twin.one_call_layers = False
    return twin


def end_to_end(pair: ModelPair, drafter: str, cfg: DecodeConfig, prompts: list[str], fast_greedy: bool = True) -> dict:
    """``prompts`` decoded with ``drafter``; ``fast_greedy=False`` (the model drafter only): with the draft
    model's T = 0 fast path off."""
    gens = [(start(pair, p, cfg, drafter) if fast_greedy else general_path(pair, p, cfg)).run() for p in prompts]
    tokens = sum(len(g.token_ids) for g in gens)
    wall = sum(g.summary().wall_s for g in gens)
    drafted = sum(g.summary().drafted for g in gens)
    ratios = sorted(x for x in map(draft_vs_verify, gens) if x is not None)
    return {"tok_s": tokens / wall, "tokens": tokens,
            "acceptance": sum(g.summary().accepted for g in gens) / drafted if drafted else None,
            "tokens_per_round": tokens / sum(len(g.rounds) for g in gens),
            "draft_vs_verify_median": ratios[len(ratios) // 2] if ratios else None, "token_ids": [g.token_ids for g in gens]}


def general_path(pair: ModelPair, prompt: str, cfg: DecodeConfig) -> Generation:
    """A run of the draft model with its T = 0 fast path off: q built, and the confidence read, per drafted token."""
    ids, _ = pair.encode_marked(prompt)
    return Generation(pair, ids, cfg, ModelDrafter(pair.draft, pair.vocab_size, Clock(pair.device),
                                                   stop_ids_of(pair, cfg), fast_greedy=False))


def compile_draft(pair: ModelPair, vocab: int) -> dict:
    """inductor on each draft layer's forward (dynamic shapes: the cache length grows)."""
    draft = pair.draft
    eager = interleaved_ms({"eager": draft}, vocab)["eager"]
    originals = [layer.forward for layer in draft.layers]
    for layer in draft.layers:
        layer.forward = torch.compile(layer.forward, dynamic=True)
    t0 = time.perf_counter()
    try:
        lm = CachedLM(draft, vocab)
        ids = filler_ids(vocab, CONTEXT + 1)
        lm.prefill(ids[:CONTEXT])
        lm.forward(ids[CONTEXT:CONTEXT + 1], keep=1)
        compile_s = time.perf_counter() - t0
        compiled = interleaved_ms({"compiled": draft}, vocab)["compiled"]
        return {"eager_ms": eager, "compiled_ms": compiled, "compile_s": compile_s}
    except Exception as e:  # noqa: BLE001 - what failed is the measurement
        return {"eager_ms": eager, "error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}
    finally:
        for layer, f in zip(draft.layers, originals):
            layer.forward = f
        torch._dynamo.reset()


COMMAND = "python -m benchmarks.levers"


def render(d: dict) -> str:
    """docs/results.md's block for one levers result: forward costs by representation and
    implementation, the draft's variants, end to end, and torch.compile."""
    hw = d["hardware"]
    out = [f"#### Levers on {cpu_id(hw)} ({', '.join(hw['cpu_flags'])}), commit `{d['commit']}`", ""]
    if d["forward_ms"]:
        out += [f"{estimator(d).capitalize()} ms of one forward with a {d['context']}-token context, by rows fed "
                "(1 = decoding, K+1 = verifying):", "",
                "| model, representation | " + " | ".join(f"{m} rows" for m in d["rows"]) + " |",
                "|---|" + "---:|" * len(d["rows"])]
        for name, ms in d["forward_ms"].items():
            out.append(f"| {name} | " + " | ".join(f"{x:.1f}" for x in ms) + " |")
        out.append("")
    if d.get("draft_forward_ms"):
        out += [f"{estimator(d).capitalize()} ms of one forward, each model's variants timed in turn (interleaved):", "",
                "| model, variant | 1 row | 7 rows |", "|---|---:|---:|"]
        for name, ms in d["draft_forward_ms"].items():
            out.append(f"| {name} | {ms['1']:.1f} | {ms['7']:.1f} |")
        out.append("")
    if d.get("not_measured"):
        out += ["Not measured: " + "; ".join(f"{name}: {why}" for name, why in d["not_measured"].items()) + ".", ""]
    if d.get("end_to_end"):
        st = d["end_to_end_settings"]
        out += [f"End to end, {len(st['prompts'])} held-out code prompts x {st['max_new_tokens']} new tokens, "
                f"K = {st['k']}, confidence {st['confidence']}, T = 0 (draft / verify: draft time per drafted "
                "token over verify time per round, median over prompts):", "",
                "| configuration | tok/s | acceptance | tokens/round | draft / verify | same tokens as verifier-only |",
                "|---|---:|---:|---:|---:|:---:|"]
        for name, e in d["end_to_end"].items():
            out.append(f"| {name} | {e['tok_s']:.2f} | {fmt(e['acceptance'], '%')} | "
                       f"{fmt(e['tokens_per_round'], 'f')} | {fmt(e['draft_vs_verify_median'], 'f')} | "
                       f"{'yes' if e['identical_to_verifier_only'] else 'no'} |")
        out.append("")
    c = d.get("compile")
    if c:
        out.append("`torch.compile` of the draft's layers (inductor, dynamic shapes): " + (
            f"failed: {c['error']}" if "error" in c else
            f"first call {c['compile_s']:.0f} s, then {c['compiled_ms']:.1f} ms a forward against "
            f"{c['eager_ms']:.1f} ms eager."))
    return "\n".join(out).rstrip()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    ap.add_argument("--quick", action="store_true", help="draft levers only, 2 prompts x 48 tokens")
    ap.add_argument("--tiny", action="store_true", help="tiny random models built in-process (seconds)")
    ap.add_argument("--compile", action="store_true", help="also torch.compile the draft (minutes on 2 cores)")
    args = ap.parse_args(argv)
    log = lambda *a: print(*a, file=sys.stderr, flush=True)  # noqa: E731
    cpu = torch.device("cpu")
    models = tiny_pair.loaders(args.tiny)
    pair = models.load_pair(device="cpu")  # the default pair: the verifier and draft the calibration chose (tiny: int8)
    env, vocab = environment(pair), pair.vocab_size
    cut = TINY_CUT if args.tiny else CUT
    results, verifier, not_measured = {}, {}, {}

    # 1a. the draft's variants, interleaved: representation, kernel, output rows, batch invariance
    default = pair.draft_precision
    variants = {f"{v.label}{' (default)' if v.label == default.label else ''}": (v, 0, "draft")
                for v in cpu_variants() if not v.transposed or v.label == default.label}
    variants[f"{default.label}, output layer cut to {cut} ids"] = (default, cut, "draft")
    variants[f"{default.label}, batch-invariant (as a verifier)"] = (default, 0, "target")
    drafts = {}
    for label, (prec, ids, role) in variants.items():
        drafts[label] = (models.load_model(pair.draft_name, cpu, prec, role, draft_vocab=ids)[0], prec)
    twin = op_by_op(drafts[f"{default.label} (default)"][0])
    if twin is None:
        not_measured[f"draft, {default.label}, each layer op by op"] = NO_ONE_CALL
    else:
        drafts[f"{default.label}, each layer op by op (not one call)"] = (twin, default)
    for rows in (1, 7):
        for label, ms in interleaved_ms({k: m for k, (m, _) in drafts.items()}, vocab, rows).items():
            results.setdefault(f"draft, lean forward, {label}", {})[rows] = ms
    # 1c. the verifier as it runs, and each layer op by op (the same weights), interleaved
    twin = op_by_op(pair.target)
    if twin is None:
        not_measured[f"verifier, {pair.precision.label}, each layer op by op"] = NO_ONE_CALL
    else:
        for rows in (1, 7):
            both = {"each layer one call (default)": pair.target, "each layer op by op": twin}
            for label, ms in interleaved_ms(both, vocab, rows).items():
                results.setdefault(f"verifier, lean forward, {pair.precision.label}, {label}", {})[rows] = ms
    for label, ms in results.items():
        log(f"{label:70s} 1 row {ms[1]:6.1f} ms, 7 rows {ms[7]:6.1f} ms")
    for label, why in not_measured.items():
        log(f"{label:70s} not measured: {why}")

    # 2. end to end with each draft that could win, the hybrid drafter and the sampling fast path
    n = 16 if args.tiny else 48 if args.quick else 128
    prompts, = tiny_pair.prompt_texts(args.tiny, PROMPTS[:2] if args.quick else PROMPTS)
    cfg = DecodeConfig(max_new_tokens=n)
    start(pair, "def warmup():", DecodeConfig(max_new_tokens=8), "model").run()
    e2e = {"verifier only": end_to_end(pair, "none", cfg, prompts)}
    base_ids = e2e["verifier only"]["token_ids"]
    for label, (model, prec) in drafts.items():
        if "batch-invariant" in label or prec.name in ("float32",):
            continue
        p = ModelPair(pair.target, pair.tokenizer, model, pair.target_name, pair.draft_name, vocab, cpu,
                      pair.precision, prec)
        e2e[f"draft {label}"] = end_to_end(p, "model", cfg, prompts)
    e2e["hybrid drafter (lookup, else the default draft)"] = end_to_end(pair, "hybrid", cfg, prompts)
    e2e["default draft, q and confidence per token at T = 0 (no fast path)"] = end_to_end(pair, "model", cfg, prompts,
                                                                                           fast_greedy=False)
    for label, r in e2e.items():
        r["identical_to_verifier_only"] = r.pop("token_ids") == base_ids
        log(f"{label:70s} {r['tok_s']:6.2f} tok/s  draft / verify {r['draft_vs_verify_median'] or 0:.3f}  acceptance {r['acceptance'] or 0:.2f}"
            f"  identical {r['identical_to_verifier_only']}")
    del drafts
    gc.collect()

    compiled = compile_draft(pair, vocab) if args.compile else None
    if compiled:
        log(f"torch.compile of the draft's layers: {compiled}")

    # 1b. the verifier, one representation at a time (each is 1.5-6 GB)
    if not args.quick:
        for v in cpu_variants():
            if v.transposed:
                continue
            model, _ = models.load_model(pair.target_name, cpu, v, "target")
            verifier[f"verifier, lean forward, {v.label}"] = forward_ms(model, vocab)
            log(f"verifier {v.label:30s} " + " ".join(f"{x:7.1f}" for x in verifier[f'verifier, lean forward, {v.label}']))
            del model
            gc.collect()
        model, _ = models.load_model(TRANSFORMERS + pair.target_name, cpu, pair.precision, "target")
        verifier[f"verifier, transformers' forward, {pair.precision.label}"] = forward_ms(model, vocab)
        del model
    out = Path(args.out or tiny_pair.default_out("levers", env, args.tiny))
    write_json(out, {"benchmark": "levers", **env, "quick": args.quick, "tiny": args.tiny, "rows": list(ROWS),
                     "context": CONTEXT, "estimator": ESTIMATOR,
                     "forward_ms": verifier, "draft_forward_ms": results, "not_measured": not_measured,
                     "end_to_end": e2e,
                     "end_to_end_settings": {"prompts": prompts, "max_new_tokens": n, "k": cfg.k,
                                             "confidence": cfg.confidence, "temperature": 0.0},
                     "compile": compiled})
    log(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
