"""A learner's first run and every start after it: peak memory, disk, and the seconds to a model.

    python -m benchmarks.first_run            # ~5 min on 2 cores: a first run, then warm starts
    python -m benchmarks.first_run --tiny     # the script itself, on nothing (seconds; what the tests run)

Everything runs as a user would, in fresh processes, with an empty cache of its own
(``$SPECDEC_CACHE`` in a temporary folder). ``--keep-timings`` copies this machine's kernel
timings in, so that the calibration is not part of the first run (results before 2026-12-06 were
measured so; the JSON's ``calibration_in_first_run`` says which):

1. **first run**: ``python -m specdec generate`` with nothing cached: it times the kernel variants
   (unless kept), reads the GGUF parts in place, packs both models into the precisions this machine
   picks and saves them. Its wall time
   and its peak resident memory (``ru_maxrss`` of that process alone, from ``wait4``; a child's
   figure starts from its parent's size at the fork, and this script never loads a model).
2. **disk**: what the cache then holds (``specdec.weights.store``: blocks really used).
3. **warm CLI**: the same command with one new token, ``--repeats`` times: the seconds from the
   process's start to "models ready" (its progress line) and to its exit with the first token.
4. **warm app**: ``python app.py``, to the line "models ready in N s" it prints, ``--repeats`` times.

Run it on an idle machine. The issue's targets (first run <= 4 GiB, cache <= 3 GB, models ready
and first token <= 5 s) are written next to the figures; no test times anything.
"""
from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch

from benchmarks.common import ROOT, machine, write_json
from benchmarks.tables import machine_line

PROMPT = "Write a Python function that returns the n-th Fibonacci number."
TARGETS = {"first_run_peak_gib": 4.0, "cache_gb": 3.0, "models_ready_s": 5.0, "first_token_s": 5.0}


def timed_process(cmd: list[str], env: dict, until: str | None = None, timeout: float = 1800) -> dict:
    """Run ``cmd``; every stderr line stamped with the seconds since the start; its own peak RSS.
    With ``until``, the process is stopped once a line contains it (the app never exits)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[tuple[float, str]] = []
    seen = threading.Event()

    def read():
        for line in proc.stderr:
            lines.append((time.perf_counter() - t0, line.rstrip()))
            if until and until in line:
                seen.set()
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    threading.Thread(target=proc.stdout.read, daemon=True).start()  # drained, never blocking the child
    if until:
        if not seen.wait(timeout):
            proc.kill()
            raise RuntimeError(f"{cmd[1]}: no {until!r} within {timeout:.0f} s:\n" + "\n".join(l for _, l in lines[-20:]))
        proc.terminate()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    reader.join(5)
    if not until and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])} failed ({proc.returncode}):\n" + "\n".join(l for _, l in lines[-20:]))
    return {"wall_s": wall, "peak_rss_gib": usage.ru_maxrss * 1024 / 2**30, "lines": lines}


def at(lines: list[tuple[float, str]], text: str) -> float | None:
    return next((t for t, line in lines if text in line), None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


COMMAND = "python -m benchmarks.first_run"


def render(d: dict) -> str:
    """docs/results.md's block for one result: a first run's memory, time and cache, and the warm
    starts after it, against their targets."""
    s, t, f = d["summary"], d["targets"], d["first_run"]
    ok = lambda x, lim, unit: f"{'met' if x <= lim else 'missed'} (target <= {lim:g} {unit})"  # noqa: E731
    out = ["#### A first run and the starts after it", "",
           f"{machine_line(d)}. `python -m specdec generate` with an empty cache ("
           + ("the kernel calibration included" if d.get("calibration_in_first_run") else
              "this machine's kernel timings copied in") + "), "
           f"then {len(d['warm_cli'])} warm starts each of the CLI (one new token) and of `app.py`; every run a fresh "
           "process, medians. Peak memory is that process's own `ru_maxrss`; disk is the blocks the cache uses.", "",
           "| what | measured | against the issue's target |", "|---|---:|---|",
           f"| first run, peak resident memory (packing included) | {s['first_run_peak_gib']:.2f} GiB "
           f"| {ok(s['first_run_peak_gib'], t['first_run_peak_gib'], 'GiB')} |",
           f"| first run, wall time (8 tokens) | {f['wall_s']:.0f} s | – |",
           f"| cache after it | {s['cache_gb']:.2f} GB | {ok(s['cache_gb'], t['cache_gb'], 'GB')} |",
           f"| warm app: models ready | {s['models_ready_s']:.1f} s | {ok(s['models_ready_s'], t['models_ready_s'], 's')} |",
           f"| warm CLI: models ready | {s['cli_models_ready_s']:.1f} s | – |",
           f"| warm CLI: start to first token (and exit) | {s['first_token_s']:.1f} s "
           f"| {ok(s['first_token_s'], t['first_token_s'], 's')} |", "",
           "The cache: " + ", ".join(f"`{k}` {v / 1e9:.2f} GB" for k, v in d["disk"]["files"].items() if v >= 1e7) + "."]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="warm starts of the CLI and of the app (default 3)")
    parser.add_argument("--tiny", action="store_true", help="check the script on nothing (the tests' run)")
    parser.add_argument("--keep-timings", action="store_true",
                        help="copy this machine's kernel timings in: a first run without the calibration")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    from specdec.options import cache_root
    from specdec.weights import store
    cache = Path(tempfile.mkdtemp(prefix="specdec-first-run-"))
    env = {**os.environ, "SPECDEC_CACHE": str(cache), "PYTHONUNBUFFERED": "1"}
    timings = cache_root() / "calibration"
    if args.keep_timings and timings.is_dir():
        shutil.copytree(timings, cache / "calibration")
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    try:
        if args.tiny:  # the measuring code on a trivial child, and the cache listing of an empty cache
            child = timed_process([sys.executable, "-c", "import sys; print('models ready', file=sys.stderr)"], env)
            first = {**child, "ready_s": at(child["lines"], "models ready")}
            cli = app = [{"ready_s": first["ready_s"], "wall_s": child["wall_s"]}]
            chosen = {"precision_reason": "tiny: nothing loaded", "draft_precision_reason": ""}
        else:
            cmd = [sys.executable, "-m", "specdec", "generate", "--prompt", PROMPT, "--json"]
            log("first run (nothing cached) ...")
            child = timed_process(cmd + ["--max-new-tokens", "8"], env)
            first = {"wall_s": child["wall_s"], "peak_rss_gib": child["peak_rss_gib"],
                     "ready_s": at(child["lines"], "models ready")}
            chosen = {key: next((line.removeprefix(prefix) for _, line in child["lines"] if line.startswith(prefix)), "")
                      for key, prefix in (("precision_reason", "precision "), ("draft_precision_reason", "draft precision "))}
            log(f"first run: {first['wall_s']:.0f} s, peak {first['peak_rss_gib']:.2f} GiB")
            cli, app = [], []
            for i in range(args.repeats):
                c = timed_process(cmd + ["--max-new-tokens", "1"], env)
                cli.append({"ready_s": at(c["lines"], "models ready"), "wall_s": c["wall_s"],
                            "peak_rss_gib": c["peak_rss_gib"]})
                a = timed_process([sys.executable, "app.py", "--port", str(free_port())], env, until="models ready in")
                app.append({"ready_s": at(a["lines"], "models ready in"), "peak_rss_gib": a["peak_rss_gib"]})
                log(f"warm {i + 1}: CLI ready {cli[-1]['ready_s']:.1f} s, first token and exit {c['wall_s']:.1f} s; "
                    f"app ready {app[-1]['ready_s']:.1f} s")
        held = store.inventory(cache)
        disk = {"total_gb": sum(e.bytes for e in held) / 1e9,
                "files": {str(e.path.relative_to(cache)): e.bytes for e in held}}
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    out = {"benchmark": "first_run", "tiny": args.tiny, **machine(torch.device("cpu")), **chosen,
           "precision": chosen["precision_reason"].split(":")[0], "prompt": PROMPT,
           "calibration_in_first_run": not (args.keep_timings and timings.is_dir()),
           "first_run": first, "disk": disk, "warm_cli": cli, "warm_app": app, "targets": TARGETS,
           "summary": {"first_run_peak_gib": first.get("peak_rss_gib"), "cache_gb": disk["total_gb"],
                       "models_ready_s": statistics.median(r["ready_s"] for r in app),
                       "cli_models_ready_s": statistics.median(r["ready_s"] for r in cli),
                       "first_token_s": statistics.median(r["wall_s"] for r in cli)}}
    name = "first_run-tiny.json" if args.tiny else f"first_run-{out['cpu_slug']}.json"
    path = args.out or ROOT / "benchmarks" / "results" / name
    write_json(path, out)
    log(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
