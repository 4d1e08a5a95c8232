"""Our engine against llama.cpp (llama-cpp-python) on the same GGUF verifier with the same thread
count: greedy tok/s of verifier-only decoding and of speculative decoding (ours: the draft model
and prompt lookup; llama.cpp: its prompt-lookup mode), and each engine's cost of one forward
fitted as t(L) = t_f + t_r*L (docs/notation.md), each L's time the fastest of its reps for both engines
(:func:`specdec.model.timing.fastest_ms`). Without llama-cpp-python, or with --tiny, llama.cpp is recorded as
null with the reason and our numbers are still written.

    python -m benchmarks.runtime_compare           # 4 prompts x 128 tokens; L = 1..16, 11 reps
    python -m benchmarks.runtime_compare --quick   # 2 prompts x 32 tokens; L = 1..8, 7 reps
    python -m benchmarks.runtime_compare --tiny    # tiny random models: checks the script, measures nothing
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks import tiny_pair
from benchmarks.common import write_json
from benchmarks.profile import CONTEXT, DRAFTERS, fit, forward_costs, setup
from benchmarks.sweep import pooled, run
from benchmarks.tables import estimator, fit_rows, fmt, machine_line
from benchmarks.throughput import llama_cpp_runner
from specdec.model.timing import ESTIMATOR, Timed, fastest_ms, filler_ids
from specdec.weights.catalogue import DEFAULT_TARGET, EMBEDDED
from specdec.weights.gguf import gguf_file

LOOKUP_NGRAM = 3  # the longest n-gram both prompt-lookup drafters match (ours: LookupDrafter's max_ngram)


def generate(llm, ids: list[int], stop_ids, max_new: int) -> dict:
    """Greedy decoding with a ``Llama`` (its draft model, if any, drafting), from a cold cache."""
    llm.reset()  # no prefix reuse between prompts: ours prefills every prompt too
    t0 = time.perf_counter()
    new = []
    for tok in llm.generate(ids, temp=0.0, top_k=1, reset=True):
        new.append(tok)
        if tok in stop_ids or len(new) >= max_new:
            break
    wall = time.perf_counter() - t0
    return {"tokens": len(new), "wall_s": wall, "tok_s": len(new) / wall, "token_ids": new}


def llama_forward_cost(llm, vocab: int, lengths: list[int], reps: int, k: int) -> dict:
    """The fit for llama.cpp's forward (``Llama.eval``) of L tokens after CONTEXT tokens, keeping
    the logits of all L (``logits_all``), as a verification needs and as our forwards in the fit
    do. Rewinding is setting ``n_tokens`` back: ``eval`` first drops every KV entry from there on.
    Checked once: the last logits after a rewind against a fresh evaluation of the same tokens."""
    ids = filler_ids(vocab, CONTEXT + max(lengths))
    llm.reset()
    llm.eval(ids[:CONTEXT])
    ms = fastest_ms({"llama.cpp": Timed(lambda: setattr(llm, "n_tokens", CONTEXT),
                                        lambda n: llm.eval(ids[CONTEXT:CONTEXT + n]))}, lengths, reps)["llama.cpp"]
    end = CONTEXT + max(lengths)
    llm.n_tokens = CONTEXT
    llm.eval(ids[CONTEXT:end])
    rewound = llm.scores[end - 1].copy()
    llm.reset()
    llm.eval(ids[:end])
    fresh = llm.scores[end - 1].copy()
    return {**fit(lengths, [ms[n] for n in lengths], k), "rewind_check": {
        "same_argmax": bool(rewound.argmax() == fresh.argmax()),
        "max_abs_logit_diff": float(np.abs(rewound - fresh).max())}}


def llama_cpp(pair, prompts, n: int, k: int, lengths: list[int], reps: int, log) -> tuple[dict | None, str | None]:
    """llama.cpp's runs and forward fit, or None and why not."""
    if pair.target_name != DEFAULT_TARGET:
        return None, f"llama.cpp runs the embedded GGUF of {DEFAULT_TARGET}; the verifier here is {pair.target_name}"
    threads = torch.get_num_threads()
    try:
        greedy, why_not = llama_cpp_runner(threads)
        if greedy is None:
            return None, why_not
        gguf = gguf_file(EMBEDDED[DEFAULT_TARGET])  # assembled by the runner already
        from llama_cpp import Llama
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding
        # logits_all=True by hand: a draft model makes Llama keep every token's logits, but it sizes
        # its logits buffer from this argument, and a buffer of n_batch rows overflows past 512 tokens.
        lookup = Llama(model_path=str(gguf), n_threads=threads, n_threads_batch=threads, n_ctx=2048, verbose=False,
                       logits_all=True, draft_model=LlamaPromptLookupDecoding(max_ngram_size=LOOKUP_NGRAM,
                                                                              num_pred_tokens=k))
        rows = {"llama.cpp greedy": [], "llama.cpp prompt lookup": []}
        for text, ids in prompts:
            rows["llama.cpp greedy"].append(greedy(pair, text, n))
            rows["llama.cpp prompt lookup"].append(generate(lookup, ids, pair.stop_ids, n))
        cost = llama_forward_cost(lookup, pair.vocab_size, lengths, reps, k)
    except (ValueError, RuntimeError, OSError) as e:  # llama-cpp-python's load and decode failures
        return None, f"llama.cpp failed: {type(e).__name__}: {e}"
    log(f"llama.cpp verifier forward: a = {cost['a_ms']:.2f} ms, b = {cost['b_ms_per_token']:.3f} ms/token, "
        f"R^2 = {cost['r2']:.3f}")
    return {"gguf": str(gguf), "model": DEFAULT_TARGET, "threads": threads, "lookup_ngram": LOOKUP_NGRAM,
            "lookup_tokens": k, "runs": rows, "forward_cost": {"verifier": cost}}, None


def totals(rows: list[dict]) -> dict:
    tokens, wall = sum(r["tokens"] for r in rows), sum(r["wall_s"] for r in rows)
    return {"tokens": tokens, "wall_s": wall, "tok_s": tokens / wall}


COMMAND = "python -m benchmarks.runtime_compare"


def render(d: dict) -> str:
    """docs/results.md's block for one result: each method's tok/s against llama.cpp's, and both
    engines' forward fits."""
    s, llama = d["settings"], d.get("llama_cpp")
    out = ["#### Runtime vs algorithm: our engine against llama.cpp on the same GGUF", "",
           f"{machine_line(d)}. Greedy, {len(s['prompts'])} code prompts x {s['max_new_tokens']} new tokens, one run "
           f"each (tok/s: all tokens over all wall time), K = "
           f"{s['k']} (llama.cpp's prompt lookup: {s['k']} tokens per round)."
           + (f" llama.cpp {llama['threads']} threads." if llama else f" llama.cpp not measured: {d['why']}."), "",
           "| engine, method | tok/s | vs llama.cpp greedy | same tokens as our greedy |", "|---|---:|---:|:---:|"]
    ratio = d.get("vs_llama_cpp_greedy") or {}
    for name, tok_s in d["tok_s"].items():
        same = (llama or {}).get(name, {}).get("same_tokens_as_ours_greedy")
        out.append(f"| {name} | {tok_s:.2f} | {fmt(ratio.get(name), 'x')} "
                   f"| {'–' if same is None else f'{sum(same)}/{len(same)} prompts'} |")
    costs = {f"ours, {role}": f for role, f in d["forward_cost"]["ours"].items()}
    costs |= {f"llama.cpp, {role}": f for role, f in (d["forward_cost"].get("llama.cpp") or {}).items()}
    out += ["", f"Cost of one forward of L tokens after {s['context']} tokens, t(L) = t_f + t_r·L, fitted over "
                f"L = {s['lengths'][0]}..{s['lengths'][-1]}, each L's time the {estimator(s)} of its {s['reps']} reps:", ""]
    out += fit_rows(costs, s["k"])
    return "\n".join(out)


def main(argv=None) -> int:
    args, (n, lengths, reps), log, pair, prompts, env, cfg = setup(
        argv, __doc__.splitlines()[0], 128, "tiny random models built in-process; no llama.cpp",
        "our K, and llama.cpp's lookup tokens per round")

    ours = {}
    for name, drafter in DRAFTERS.items():
        gens = [run(pair, ids, cfg, drafter) for _, ids in prompts]
        s = pooled(gens)
        ours[f"ours: {name}"] = {"tokens": s.new_tokens, "wall_s": s.wall_s, "tok_s": s.tokens_per_s,
                                 "acceptance": s.acceptance_rate, "token_ids": [g.token_ids for g in gens]}
        log(f"ours: {name:26s} {s.tokens_per_s:7.2f} tok/s")
    ours_cost = forward_costs(pair, lengths, reps, args.k, log)

    if args.tiny:
        llama, why_not = None, tiny_pair.NO_GGUF
    else:
        llama, why_not = llama_cpp(pair, prompts, n, args.k, lengths, reps, log)
    tok_s = {name: r["tok_s"] for name, r in ours.items()}
    if llama is not None:
        greedy_ids = ours["ours: verifier only"]["token_ids"]
        for name, rows in llama["runs"].items():
            llama[name] = {**totals(rows), "same_tokens_as_ours_greedy": [
                r["token_ids"] == ids for r, ids in zip(rows, greedy_ids)]}
            tok_s[name] = llama[name]["tok_s"]
            log(f"{name:32s} {tok_s[name]:7.2f} tok/s")
    costs = {"ours": ours_cost, "llama.cpp": llama.pop("forward_cost") if llama is not None else None}
    base = tok_s.get("llama.cpp greedy")
    out = Path(args.out or tiny_pair.default_out("runtime_compare", env, args.tiny))
    write_json(out, {"benchmark": "runtime_compare", **env, "quick": args.quick, "tiny": args.tiny,
                     "models": {"target": pair.target_name, "draft": pair.draft_name},
                     "settings": {"k": args.k, "confidence": args.confidence, "max_new_tokens": n,
                                  "temperature": 0.0, "prompts": [label for label, _ in prompts],
                                  "context": CONTEXT, "lengths": lengths, "reps": reps, "estimator": ESTIMATOR},
                     "tok_s": tok_s,
                     "vs_llama_cpp_greedy": {m: v / base for m, v in tok_s.items()} if base else None,
                     "ours": ours, "forward_cost": costs,
                     "llama_cpp": llama, "why": why_not})
    log(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
