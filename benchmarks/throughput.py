"""Throughput, memory and fidelity of the default configuration on the machine at hand, against
our own verifier-only decoding, transformers (greedy and assisted generation, same weights and
kernels) and llama.cpp (greedy, and its own draft-model speculation ``llama-speculative-simple``
at several draft lengths: same GGUF files, same thread count), in one run. Every speculative run
reports draft / verify, the draft's time per drafted token over the verify phase's time per round,
from the engine's own trace. Writes JSON; ``benchmarks/report.py`` turns it into the tables of docs/results.md and the README's headline.

    python -m benchmarks.throughput            # full: 8 prompts x 128 tokens (~25 min on 2 cores)
    python -m benchmarks.throughput --quick    # 3 prompts x 48 tokens, no sweeps (~5 min)
    python -m benchmarks.throughput --tiny     # tiny random models: checks the script, measures nothing
"""
from __future__ import annotations

import argparse
import math
import os
import re
import resource
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

from benchmarks import tiny_pair
from benchmarks.common import ROOT, cpu_id, cpu_label, environment, timed_variants, write_json
from benchmarks.fidelity import fidelity
from benchmarks.tables import anchor, fmt, measured_ms
from specdec import DecodeConfig, SamplingConfig
from specdec.decode.settings import add_model_arguments, models_from_args
from specdec.decode.start import start
from specdec.model.precision import Precision
from specdec.options import cache_root
from specdec.weights.catalogue import EMBEDDED
from specdec.weights.gguf import gguf_file
from specdec.weights.loading import TRANSFORMERS

CODE = [
    "Write a Python function that returns the n-th Fibonacci number.",
    "Write a Python class for a stack with push, pop and peek.",
    "Write a Python function that merges two sorted lists into one sorted list.",
    "Write a Python function that parses a CSV line, handling quoted fields.",
    "Write a binary search function in Python with type hints and a docstring.",
    "Write a Python function that counts word frequencies in a text file.",
]
PROSE = [
    "Explain in three sentences why the sky is blue.",
    "Describe the water cycle for a ten-year-old in one paragraph.",
]
SAMPLED = SamplingConfig(temperature=0.7, top_p=0.95)
# the names of the methods and the group the headline reads (the JSON's keys)
VERIFIER_ONLY, SPECULATIVE = "verifier only (ours)", "speculative, draft model (ours)"
ADAPTIVE = "speculative, draft model, adaptive K (ours)"  # each round's K from its acceptance and this machine's costs
SAMPLED_GROUP = "code, T=0.7 top-p 0.95"


SPEC_N_MAX = (3, 6, 8)  # llama.cpp's draft lengths tried; its best counts


def draft_vs_verify(gen) -> float | None:
    """draft / verify = (draft phase time per drafted token) / (verify phase time per round), over the
    rounds that drafted: the draft's sampling and bookkeeping count, prompt lookup's zero-cost drafts
    too. It needs no verifier-only run. It is not the card's c (docs/notation.md), whose unit is a
    verifier-only step t1 and which :class:`specdec.teach.theory.CostModel` computes: dividing by a
    verification rather than by t1, it comes out near c / v(K)."""
    rounds = [r for r in gen.rounds if r.positions]
    drafted = sum(len(r.positions) for r in rounds)
    if not drafted:
        return None
    verify = sum(r.times.verify for r in rounds) / len(rounds)
    return (sum(r.times.draft for r in rounds) / drafted) / verify


def ours(pair, prompt, cfg, drafter):
    gen = start(pair, prompt, cfg, drafter).run()
    s = gen.summary()
    out = {"tokens": s.new_tokens, "wall_s": s.wall_s, "tok_s": s.tokens_per_s, "rounds": s.rounds,
           "target_forwards": s.target_forwards, "drafted": s.drafted, "accepted": s.accepted,
           "acceptance": s.acceptance_rate, "tokens_per_round": s.mean_tokens_per_round,
           "overhead_share": s.overhead_share, "phase_totals": s.phase_totals, "token_ids": gen.token_ids,
           "draft_vs_verify": draft_vs_verify(gen)}
    if drafter == "hybrid":
        out["lookup_rounds"] = sum(r.drafted_by == "lookup" for r in gen.rounds)
    return out


@torch.inference_mode()
def transformers_generate(target, draft, pair, prompt, max_new: int, **assist):
    ids = torch.tensor([pair.encode(prompt)])
    kwargs = {"assistant_model": draft, **assist} if draft is not None else {}
    t0 = time.perf_counter()
    out = target.generate(ids, max_new_tokens=max_new, do_sample=False, eos_token_id=sorted(pair.stop_ids),
                          pad_token_id=pair.tokenizer.pad_token_id, **kwargs)
    wall = time.perf_counter() - t0
    new = out[0, ids.shape[1]:].tolist()
    return {"tokens": len(new), "wall_s": wall, "tok_s": len(new) / wall, "token_ids": new}


def llama_cpp_runner(threads: int):
    """Greedy decoding with llama.cpp on the same GGUF verifier; None and the reason if unavailable."""
    try:
        from llama_cpp import Llama
    except ImportError as e:
        return None, f"llama-cpp-python is not installed ({e}); `make bench` installs it"
    gguf = gguf_file(EMBEDDED["embedded:qwen2.5-coder-1.5b-instruct"])
    llm = Llama(model_path=str(gguf), n_threads=threads, n_threads_batch=threads, n_ctx=2048, verbose=False)

    def run(pair, prompt, max_new):
        ids = pair.encode(prompt)
        llm.reset()
        t0 = time.perf_counter()
        new = []
        for tok in llm.generate(ids, temp=0.0, top_k=1, reset=True):
            if tok in pair.stop_ids:
                new.append(tok)
                break
            new.append(tok)
            if len(new) >= max_new:
                break
        wall = time.perf_counter() - t0
        return {"tokens": len(new), "wall_s": wall, "tok_s": len(new) / wall, "token_ids": new}
    return run, None


def llama_speculative_binary() -> Path | None:
    """``llama-speculative-simple`` as ``scripts/build-llama-speculative.sh`` builds it (``make bench``)."""
    found = list((cache_root()).glob("llama.cpp-*/build/bin/llama-speculative-simple"))
    return found[0] if found else None


def llama_speculative_runner(threads: int):
    """llama.cpp's own draft-model speculation on the same two GGUF files, greedy; decode speed
    as it reports it ("decoded N tokens in S seconds") and its acceptance; None and the reason
    if the binary is missing."""
    binary = llama_speculative_binary()
    if binary is None:
        return None, "llama-speculative-simple is not built; `make bench` builds it (scripts/build-llama-speculative.sh)"
    gguf = {role: gguf_file(EMBEDDED[name])
            for role, name in (("target", "embedded:qwen2.5-coder-1.5b-instruct"),
                               ("draft", "embedded:qwen2.5-coder-0.5b-instruct"))}

    def run(pair, prompt, max_new, n_max):
        text = pair.tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                                  add_generation_prompt=True)
        cmd = [str(binary), "-m", str(gguf["target"]), "-md", str(gguf["draft"]), "--spec-type", "draft-simple",
               "--spec-draft-n-max", str(n_max), "-t", str(threads), "-td", str(threads), "-n", str(max_new),
               "--temp", "0", "-c", "2048", "-p", text]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env={**os.environ, "LLAMA_LOG_COLORS": "0"})
        if out.returncode != 0:  # a crash is a failure of the benchmark, never a skip
            raise RuntimeError(f"llama-speculative-simple failed (exit {out.returncode}): {(out.stdout + out.stderr)[-600:]}")
        return {**parse_speculative_log(out.stdout + out.stderr), "n_max": n_max}
    return run, None


def parse_speculative_log(log: str) -> dict:
    """llama-speculative-simple's own figures: "decoded N tokens in S seconds, speed: X t/s" (the
    decode phase only, the prompt excluded) and "accept = P%"."""
    decoded = re.search(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds, speed:\s+([\d.]+) t/s", log)
    accept = re.search(r"accept\s+=\s+([\d.]+)%", log)
    if decoded is None:
        raise RuntimeError(f"llama-speculative-simple printed no decode speed: {log[-600:]}")
    n, secs = int(decoded.group(1)), float(decoded.group(2))
    return {"tokens": n, "wall_s": secs, "tok_s": n / secs, "decode_only": True,
            "acceptance": float(accept.group(1)) / 100 if accept else None}


def peak_memory_of_default_run(max_new: int) -> float:
    """Peak resident memory (GiB) of `python -m specdec generate` with both models loaded."""
    subprocess.run([sys.executable, "-m", "specdec", "generate", "--prompt", CODE[0], "--max-new-tokens",
                    str(max_new)], cwd=ROOT, check=True, capture_output=True)
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20  # KiB on Linux


def geomean(xs: list[float]) -> float:
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def aggregate(rows: list[dict], method: str, base: str, prompts: list[str]) -> dict:
    """Per method over ``prompts``: tok/s over all tokens, per-prompt speedups against ``base``
    (the same prompt, same settings) and their geometric mean, acceptance over all drafts."""
    sel = {r["prompt"]: r for r in rows if r["method"] == method and r["prompt"] in prompts}
    ref = {r["prompt"]: r for r in rows if r["method"] == base and r["prompt"] in prompts}
    if not sel:
        return {}
    tok, wall = sum(r["tokens"] for r in sel.values()), sum(r["wall_s"] for r in sel.values())
    out = {"prompts": len(sel), "tokens": tok, "tok_s": tok / wall,
           "speedup_geomean": geomean([sel[p]["tok_s"] / ref[p]["tok_s"] for p in sel if p in ref]),
           "identical_to_base": (all(sel[p]["token_ids"] == ref[p]["token_ids"] for p in sel if p in ref)
                                 if all("token_ids" in r for r in sel.values()) else None)}
    ratios = sorted(r["draft_vs_verify"] for r in sel.values() if r.get("draft_vs_verify") is not None)
    if ratios:
        out["draft_vs_verify_median"] = ratios[len(ratios) // 2]
    if all(r.get("acceptance") is not None and "drafted" not in r for r in sel.values()):
        out["acceptance_reported"] = sum(r["acceptance"] for r in sel.values()) / len(sel)  # llama.cpp's own figure
    drafted = sum(r.get("drafted", 0) for r in sel.values())
    if drafted:
        out["acceptance"] = sum(r["accepted"] for r in sel.values()) / drafted
        out["tokens_per_round"] = tok / sum(r["rounds"] for r in sel.values())
    if all("overhead_share" in r for r in sel.values()):
        out["overhead_share"] = sum(r["overhead_share"] * r["wall_s"] for r in sel.values()) / wall
    return out


COMMAND = "make bench"


def _table(group: dict) -> list[str]:
    lines = ["| method | tok/s | speedup vs verifier-only (geomean) | acceptance | tokens/round | draft / verify (median) "
             "| time outside forwards | same tokens as verifier-only |", "|---|---:|---:|---:|---:|---:|---:|:---:|"]
    for name, e in group.items():
        same = ("yes" if e.get("identical_to_base") else "no (sampling)" if "T=0.7" in name else
                "–" if e.get("identical_to_base") is None else "no")
        acceptance = e.get("acceptance", e.get("acceptance_reported"))
        lines.append(f"| {name} | {e['tok_s']:.2f} | {fmt(e['speedup_geomean'], 'x')} "
                     f"| {fmt(acceptance, '%')} | {fmt(e.get('tokens_per_round'), 'f')} "
                     f"| {fmt(e.get('draft_vs_verify_median'), 'f')} | {fmt(e.get('overhead_share'), '%')} | {same} |")
    return lines


def heading(d: dict) -> str:
    """The heading of one result's block in docs/results.md (the README's headline links to it)."""
    hw = d["hardware"]
    return (f"{cpu_id(hw)} ({', '.join(hw['cpu_flags']) or 'no AVX2'}; torch ISA {hw['torch_isa']}), "
            f"{hw['cores']} cores, {hw['torch_threads']} threads")


def render(d: dict) -> str:
    """docs/results.md's block for one throughput result: its headline figures, every method per
    prompt group, and the precisions' fidelity."""
    v, s = d["versions"], d["settings"]
    out = [f"#### {heading(d)}",
           "",
           f"Precision **{d['precision']}** — {d['precision_reason']}."
           + (f" Draft precision **{d['draft_precision']}** — {d['draft_precision_reason']}."
              if d.get("draft_precision") else "") + f" torch {v['torch']}, transformers "
           f"{v['transformers']}, commit `{d['commit']}`, {d['date']}{' (quick run)' if d.get('quick') else ''}. "
           f"K = {s['k']}, confidence {s['confidence']}, {s['max_new_tokens']} new tokens, "
           f"{len(s['code_prompts'])} code + {len(s['prose_prompts'])} prose prompts; transformers on the first "
           f"{len(s['transformers_prompts'])} code prompts. llama.cpp: {d['llama_cpp']}"
           + (f"; its speculation: {d['llama_cpp_speculative']} (decode time only, as it reports it; its acceptance "
              "is its own figure)" if "llama_cpp_speculative" in d else "") + ". draft / verify is the draft phase's time "
           "per drafted token over the verify phase's time per round, from the engine's trace (not the card's c, "
           "whose unit is a verifier-only step).",
           "", "| headline | value |", "|---|---:|"]
    for name, value in d["headline"].items():
        kind = "f" if "GiB" in name or name.startswith("draft / verify") else "%" if "time outside" in name else "x"
        out.append(f"| {name} | {fmt(value, kind)} |")
    for group, rows in d["summary"].items():
        out += ["", f"**{group}**", ""] + _table(rows)
    fid = d.get("fidelity") or {}
    if fid.get("precisions"):
        out += ["", f"**Fidelity** against the {fid['reference']}, {fid['tokens']} tokens of `{fid['text']}` "
                    f"(sha256 `{fid['text_sha256'][:12]}`):", "",
                "| precision | top-1 agreement | mean KL (nats) |", "|---|---:|---:|"]
        for name, f in fid["precisions"].items():
            out.append(f"| verifier, {name} | {f['top1_agreement']:.1%} | {f['mean_kl']:.4f} |")
        for name, f in (fid.get("draft_precisions") or {}).items():
            out.append(f"| draft, {name} (against the float32 draft) | {f['top1_agreement']:.1%} | {f['mean_kl']:.4f} |")
    return "\n".join(out)


def _vs(group: dict, spec: str, base: str) -> str:
    speedup = fmt(group[spec]["speedup_geomean"], "x")
    return f"{group[spec]['tok_s']:.2f} vs {group[base]['tok_s']:.2f} tok/s, **{speedup}**"


def _headline(d: dict, prefix: str, kind: str) -> str:
    return next((fmt(v, kind) for k, v in d["headline"].items() if k.startswith(prefix)), "not measured")


def _run(d: dict) -> str:
    s = d["settings"]
    return (f"{len(s['code_prompts'])} code + {len(s['prose_prompts'])} prose prompts x {s['max_new_tokens']} tokens; "
            f"commit `{d['commit']}`, {d['date'][:10]}{' (quick run)' if d.get('quick') else ''}")


def _sampled(d: dict) -> str:
    group = d["summary"][SAMPLED_GROUP]
    pick = lambda start: next(m for m in group if m.startswith(start))  # noqa: E731
    return _vs(group, pick("speculative"), pick("verifier"))


def _vs_bound(profile: dict | None) -> str:
    """Each model's forward over its roofline bound at 1 and K+1 rows (benchmarks/roofline.py); in
    profiles written before it, the one-row forward over its weights' read time at the float32-sum
    bandwidth."""
    roof = (profile or {}).get("roofline")
    if roof and all(x["ratio"] for r in roof.values() for x in r["rows"].values()):
        k1 = str(profile["settings"]["k"] + 1)
        at = lambda n: " / ".join(f"{roof[role]['rows'][n]['ratio']:.2f}x" for role in ("verifier", "draft"))  # noqa: E731
        return f"{at('1')} (roofline; {k1} rows: {at(k1)})"
    ratios = [(profile or {}).get("forward_cost", {}).get(role, {}).get("one_row_vs_read") for role in ("verifier", "draft")]
    if not all(ratios):
        return "not measured"
    return f"{ratios[0]:.2f}x / {ratios[1]:.2f}x (weights' read time at {max(profile['bandwidth_gb_s']):.0f} GB/s)"


def _v6(profile: dict | None) -> str:
    """The verifier's fitted (K+1)-row forward over its 1-row forward, from the same machine's profile."""
    k = (profile or {}).get("settings", {}).get("k")
    f = (profile or {}).get("forward_cost", {}).get("verifier", {})
    v = f.get(f"verify_vs_decode_k{k}")
    if v is None:
        return "not measured"
    measured = measured_ms(f)
    return f"{v:.2f} (measured {measured[k + 1] / measured[1]:.2f})" if k + 1 in measured else f"{v:.2f}"


# (row label, cell of one throughput result and the profile of the same machine, or None)
HEADLINE_ROWS = [
    ("precision, verifier / draft", lambda d, p: f"{d['precision']} / {d.get('draft_precision') or d['precision']}"),
    ("code: speculative vs verifier-only", lambda d, p: _vs(d["summary"]["code"], SPECULATIVE, VERIFIER_ONLY)),
    ("code: speculative vs the fastest verifier-only", lambda d, p: _headline(d, "speculative vs the fastest", "x")
     + (f" ({d['fastest_verifier_only'].split(' (')[0]})" if "fastest_verifier_only" in d else "")),
    ("prose: speculative vs verifier-only", lambda d, p: _vs(d["summary"]["prose"], SPECULATIVE, VERIFIER_ONLY)),
    ("code, T = 0.7, top-p 0.95", lambda d, p: _sampled(d)),
    ("acceptance (accepted / drafted), code", lambda d, p: fmt(d["summary"]["code"][SPECULATIVE].get("acceptance"), "%")),
    ("tokens per round, code", lambda d, p: fmt(d["summary"]["code"][SPECULATIVE].get("tokens_per_round"), "f")),
    ("greedy output = verifier-only's, code and prose",
     lambda d, p: "yes" if all(d["summary"][g][SPECULATIVE]["identical_to_base"] for g in ("code", "prose")) else "**no**"),
    ("peak memory, default run", lambda d, p: f"{_headline(d, 'peak resident', 'f')} GiB"),
    ("verifier's K+1-row forward / 1-row, fitted (K = 6)", lambda d, p: _v6(p)),
    ("one-row forward / its bound, verifier / draft", lambda d, p: _vs_bound(p)),
    ("verifier-only vs llama.cpp greedy", lambda d, p: _headline(d, "verifier-only vs llama.cpp", "x")),
    ("speculative vs llama.cpp greedy", lambda d, p: _headline(d, "speculative vs llama.cpp greedy", "x")),
    ("speculative vs llama.cpp's own speculation, at its best",
     lambda d, p: _headline(d, "speculative vs llama.cpp's own", "x")),
    ("speculative vs transformers' best assisted generation",
     lambda d, p: _headline(d, "speculative vs best transformers", "x")),
    ("run", lambda d, p: _run(d)),
]


def render_headline(results: list[dict]) -> str:
    """The README's one table from every committed result: a column per machine the throughput
    benchmark ran on, linked to its block in docs/results.md, with figures from the profile of the
    same machine where there is one, and a GPU column that says so while no GPU has run it."""
    runs = [d for d in results if d["benchmark"] == "throughput"]
    if not runs:
        return "_No throughput results yet: run `make bench`._"
    profiles: dict[str, dict] = {}
    for d in results:
        if d["benchmark"] == "profile":
            profiles.setdefault(d.get("cpu_slug"), d)
    gpu_column = all(d["device"] == "cpu" for d in runs)
    out = ["| | " + " | ".join(f"[{cpu_label(d['hardware'])}, {d['hardware']['cores']} cores](docs/results.md#{anchor(heading(d))})" for d in runs)
           + (" | GPU (CUDA, Apple MPS) |" if gpu_column else " |"), "|---|" + "---|" * (len(runs) + gpu_column)]
    out += [f"| {label} | " + " | ".join(cell(d, profiles.get(d.get("cpu_slug"))) for d in runs)
            + (" | not measured |" if gpu_column else " |") for label, cell in HEADLINE_ROWS]
    return "\n".join(out)


def main(argv=None) -> int:
    defaults = DecodeConfig()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="3 prompts x 48 tokens, no sweeps")
    ap.add_argument("--tiny", action="store_true", help="tiny random models built in-process; no llama.cpp, "
                                                        "no peak memory, no fidelity")
    ap.add_argument("--k", type=int, default=defaults.k)
    ap.add_argument("--confidence", type=float, default=defaults.confidence)
    ap.add_argument("--max-new-tokens", type=int, default=None, help="default 128 (48 with --quick, 16 with --tiny)")
    add_model_arguments(ap)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    code, prose = tiny_pair.prompt_texts(args.tiny, *((CODE[:2], PROSE[:1]) if args.quick else (CODE, PROSE)))
    n = args.max_new_tokens or (16 if args.tiny else 48 if args.quick else 128)
    log = lambda *a: print(*a, file=sys.stderr, flush=True)  # noqa: E731
    cfg = DecodeConfig(max_new_tokens=n, k=args.k, confidence=args.confidence)
    sampled = DecodeConfig(max_new_tokens=n, k=args.k, confidence=args.confidence, sampling=SAMPLED)

    # --tiny: what needs the real models' files (a default run of the command line, the GGUF files
    # llama.cpp reads, the float32 reference of the fidelity) is not measured, and the JSON says why
    memory, why_no_memory = (None, "--tiny: a default run loads the real models") if args.tiny else (
        peak_memory_of_default_run(16), None)
    log(f"peak resident memory of a default run: {fmt(memory, 'f')} GiB")
    models = tiny_pair.loaders(args.tiny)
    pair = models.load_pair() if args.tiny else models_from_args(args).load()
    env = environment(pair)
    ours(pair, "def warmup():", DecodeConfig(max_new_tokens=8), "model")
    rows = []

    def record(method, prompt, r):
        r.update(method=method, prompt=prompt)
        rows.append(r)
        log(f"{method:44s} {r['tok_s']:6.2f} tok/s  {r['tokens']:4d} tokens  {prompt[:40]}")

    # the fastest verifier-only configuration here: the representation fastest at one row, which
    # need not be the default (chosen for 1 + K+1 rows); speculation is judged against it too
    timings = models.timings() if pair.device.type == "cpu" else {}
    fastest = min(timings, key=lambda n: timings[n][0]) if timings else pair.precision.label
    solo = (models.load_pair(pair.target_name, None, "cpu", Precision.from_label(fastest).name)
            if fastest != pair.precision.label else None)
    fastest_base = f"verifier only, {fastest} (the fastest verifier-only here)"
    for prompt in code + prose:
        record(VERIFIER_ONLY, prompt, ours(pair, prompt, cfg, "none"))
        if solo is not None:
            record(fastest_base, prompt, ours(solo, prompt, cfg, "none"))
        record(SPECULATIVE, prompt, ours(pair, prompt, cfg, "model"))
        record(ADAPTIVE, prompt, ours(pair, prompt, replace(cfg, adaptive=True), "model"))
        record("speculative, prompt lookup (ours)", prompt, ours(pair, prompt, cfg, "lookup"))
        record("speculative, hybrid: lookup, else model (ours)", prompt, ours(pair, prompt, cfg, "hybrid"))
    for prompt in code:
        record("verifier only, T=0.7 top-p 0.95 (ours)", prompt, ours(pair, prompt, sampled, "none"))
        record("speculative, T=0.7 top-p 0.95 (ours)", prompt, ours(pair, prompt, sampled, "model"))
    if not args.quick:
        for k, conf in [(4, 0.0), (6, 0.0), (6, 0.4), (8, 0.6)]:
            sweep = DecodeConfig(max_new_tokens=n, k=k, confidence=conf)
            for prompt in code[:3] + prose[:1]:
                record(f"sweep: K={k}, confidence {conf}", prompt, ours(pair, prompt, sweep, "model"))

    llama, why_not = (None, tiny_pair.NO_GGUF) if args.tiny else llama_cpp_runner(torch.get_num_threads())
    if llama is not None:
        for prompt in code + prose:
            record("llama.cpp greedy (same GGUF)", prompt, llama(pair, prompt, n))
    llama_spec, why_not_spec = ((None, tiny_pair.NO_GGUF) if args.tiny else
                                llama_speculative_runner(torch.get_num_threads()))
    if llama_spec is not None:
        for n_max in SPEC_N_MAX[:2] if args.quick else SPEC_N_MAX:
            for prompt in code + prose:
                record(f"llama.cpp speculative, draft-simple n_max {n_max} (same GGUF pair)", prompt,
                       llama_spec(pair, prompt, n, n_max))

    # transformers on the very same weights and kernels: its own forward, our packed Linear layers.
    hf_prompts = code[:2]
    hf = models.load_pair(TRANSFORMERS + pair.target_name, TRANSFORMERS + pair.draft_name, "cpu", pair.precision.name)
    # name: assistant settings (None: no assistant). Each run sets them on the draft's generation_config.
    settings = {"transformers greedy": None, "transformers assisted (its defaults)": {}}
    if not args.quick:
        settings.update({f"transformers assisted ({sched} {k}, confidence {c})": {
            "num_assistant_tokens": k, "num_assistant_tokens_schedule": sched, "assistant_confidence_threshold": c}
            for sched, k, c in [("constant", 4, 0.0), ("constant", 6, 0.4), ("heuristic", 6, 0.4)]})
    for name, assist in settings.items():
        if assist:
            hf.draft.generation_config.update(**assist)
        for prompt in hf_prompts:
            draft = hf.draft if assist is not None else None
            record(name, prompt, transformers_generate(hf.target, draft, pair, prompt, n))
    del hf

    base = VERIFIER_ONLY
    summary = {"code": {}, "prose": {}, SAMPLED_GROUP: {}}
    for method in dict.fromkeys(r["method"] for r in rows):
        if "T=0.7" in method:
            summary[SAMPLED_GROUP][method] = aggregate(rows, method, "verifier only, T=0.7 top-p 0.95 (ours)", code)
            continue
        summary["code"][method] = aggregate(rows, method, base, code)
        if method.startswith("transformers"):
            continue
        summary["prose"][method] = aggregate(rows, method, base, prose)
    summary = {k: {m: e for m, e in v.items() if e} for k, v in summary.items()}
    spec = SPECULATIVE
    fastest_measured = max([base] + ([fastest_base] if solo is not None else []),
                           key=lambda m: summary["code"][m]["tok_s"])
    best_assisted = max((m for m in summary["code"] if m.startswith("transformers assisted")),
                        key=lambda m: summary["code"][m]["tok_s"])
    ours_on_hf_prompts = aggregate(rows, spec, base, hf_prompts)["tok_s"]
    headline = {
        "speculative vs verifier-only, code (geomean)": summary["code"][spec]["speedup_geomean"],
        "speculative vs the fastest verifier-only configuration measured, code (geomean)": (
            aggregate(rows, spec, fastest_measured, code)["speedup_geomean"]),
        "speculative vs verifier-only, prose (geomean)": summary["prose"][spec]["speedup_geomean"],
        "adaptive K vs verifier-only, code (geomean)": summary["code"][ADAPTIVE]["speedup_geomean"],
        "adaptive K vs verifier-only, prose (geomean)": summary["prose"][ADAPTIVE]["speedup_geomean"],
        "speculative vs verifier-only, code, T=0.7 (geomean)":
            summary[SAMPLED_GROUP]["speculative, T=0.7 top-p 0.95 (ours)"]["speedup_geomean"],
        f"speculative vs best transformers assisted ({best_assisted})":
            ours_on_hf_prompts / summary["code"][best_assisted]["tok_s"],
        "peak resident memory, default run (GiB)": memory,
        "time outside model forwards, speculative": summary["code"][spec].get("overhead_share"),
    }
    ratios = [r["draft_vs_verify"] for r in rows if r["method"] == spec and r.get("draft_vs_verify") is not None]
    headline["draft / verify = draft time per drafted token / verify time per round, speculative (median)"] = (
        sorted(ratios)[len(ratios) // 2] if ratios else None)
    if llama is not None:
        ll = aggregate(rows, "llama.cpp greedy (same GGUF)", base, code + prose)["tok_s"]
        headline["verifier-only vs llama.cpp greedy"] = aggregate(rows, base, base, code + prose)["tok_s"] / ll
        headline["speculative vs llama.cpp greedy"] = aggregate(rows, spec, base, code + prose)["tok_s"] / ll
    if llama_spec is not None:
        spec_methods = [m for m in summary["code"] if m.startswith("llama.cpp speculative")]
        best = max(spec_methods, key=lambda m: aggregate(rows, m, base, code + prose)["tok_s"])
        headline[f"speculative vs llama.cpp's own speculation at its best ({best})"] = (
            aggregate(rows, spec, base, code + prose)["tok_s"] / aggregate(rows, best, base, code + prose)["tok_s"])
    # every representation but float32 (the reference) and the reference-speed paths the calibration dropped
    if args.tiny:
        fid = {"not measured": "--tiny: tiny random models have no float32 dequantized GGUF model"}
    elif args.quick:
        fid = {}
    else:
        log("measuring fidelity against the float32 dequantized models")
        fid = fidelity(pair, [v.label for v in timed_variants(models.timings()) if v.name != "float32"],
                       [pair.draft_precision.label] if pair.draft_precision else [])
    out = Path(args.out or tiny_pair.default_out("throughput", env, args.tiny))
    write_json(out, {"benchmark": "throughput", **env, "quick": args.quick, "tiny": args.tiny,
                     "fastest_verifier_only": fastest_measured, "peak_memory": why_no_memory or "measured",
                     "llama_cpp": "measured" if llama is not None else why_not,
                     "llama_cpp_speculative": "measured" if llama_spec is not None else why_not_spec,
                     "settings": {"k": args.k, "confidence": args.confidence, "max_new_tokens": n,
                                  "code_prompts": code, "prose_prompts": prose,
                                  "sampled": {"temperature": SAMPLED.temperature, "top_p": SAMPLED.top_p},
                                  "transformers_prompts": hf_prompts},
                     "headline": headline, "summary": summary, "fidelity": fid, "runs": rows})
    log(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
