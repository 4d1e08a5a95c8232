"""What the page costs the engine: the same run through the CLI and through the app's Run tab.

    python -m benchmarks.app_overhead                    # defaults: 2 fresh apps, 128 and 256 tokens (~6 min)
    python -m benchmarks.app_overhead --tokens 64        # shorter

For each budget it runs ``python -m specdec generate --json`` (the CLI, its own process) and then
the launched app (``python app.py``, its own process) driven in headless Chromium exactly as a
learner would: fill the prompt, press Run, wait for "Finished", download the trace. Both use the
same prompt and settings, and at temperature 0 they run the very same rounds, so the two traces
are compared round by round: decode tok/s on both sides (tokens over the rounds' compute, every
round included, the prefill not: the page's own "tok/s decoding"), and how round times grow over
the run (the median of the last quarter of rounds over the first quarter, each round's time
divided by the CLI's time for the same round). The first app run is a freshly started app's first
run, reported on its own too. The page's own "other processes used N% of the cores" is recorded
beside the harness's count of the browser's CPU time. Run it on an idle machine.
"""
from __future__ import annotations

import argparse
import json
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import ROOT, write_json
from benchmarks.tables import machine_line

PROMPT = "Write a Python function that merges two sorted lists."
PY = sys.executable


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cli_run(prompt: str, tokens: int) -> dict:
    out = subprocess.run([PY, "-m", "specdec", "generate", "--prompt", prompt, "--max-new-tokens", str(tokens),
                          "--json"], cwd=ROOT, check=True, capture_output=True, text=True)
    run = json.loads(out.stdout)
    run["precision_reason"] = next((line.removeprefix("precision ") for line in out.stderr.splitlines()
                                    if line.startswith("precision ")), "")
    return run


class App:
    """The launched app (its own process) and one headless Chromium page on it, used as a learner
    would: fill the prompt, press Run, read the page. The page is polled once a second through
    ``textContent``, which costs the browser next to nothing (Playwright's own ``expect`` polling
    builds an accessibility snapshot each time, which would bill the page for the harness)."""

    def __init__(self, log):
        from playwright.sync_api import sync_playwright

        from benchmarks import chromium as browser
        self.port = _free_port()
        self.process = subprocess.Popen([PY, "app.py", "--port", str(self.port)], cwd=ROOT,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.playwright = sync_playwright().start()
        self.chromium = browser.launch(self.playwright)
        self.page = self.chromium.new_page(viewport={"width": 1280, "height": 800})
        for _ in range(120):
            try:
                self.page.goto(f"http://127.0.0.1:{self.port}")
                break
            except Exception:  # noqa: BLE001 - the server is not up yet
                time.sleep(1)
        t0 = time.perf_counter()
        self.page.get_by_role("tab", name="Run").click()
        self._wait("() => document.body.textContent.includes('Ready: ')")  # the models are loaded
        log(f"app: models ready {time.perf_counter() - t0:.0f} s after the page opened")

    def _wait(self, js: str) -> None:
        self.page.wait_for_function(js, polling=1000, timeout=1_800_000)

    def browser_cpu_s(self) -> float:
        """CPU seconds used so far by every Chromium process this harness started."""
        import psutil
        total = 0.0
        for p in psutil.Process().children(recursive=True):
            try:
                if "chrom" in p.name():
                    t = p.cpu_times()
                    total += t.user + t.system
            except psutil.NoSuchProcess:
                pass
        return total

    def run(self, prompt: str, tokens: int) -> tuple[dict, dict]:
        page = self.page
        page.get_by_role("textbox", name=re.compile(r"^Prompt")).fill(prompt)
        page.get_by_label("Max new tokens").fill(str(tokens))
        cpu0 = self.browser_cpu_s()
        t0 = time.perf_counter()
        page.get_by_role("button", name="Run", exact=True).click()
        # the page still shows the previous run's "Finished" until the new run's first view
        page.wait_for_function("() => !document.body.textContent.includes('Finished (')", polling=50)
        self._wait("() => document.body.textContent.includes('Finished (')")
        wall = time.perf_counter() - t0
        browser_cpu = self.browser_cpu_s() - cpu0
        shown = page.get_by_text(re.compile(r"tok/s.{0,3} decoding = \d+ tokens")).first.inner_text()
        others = page.get_by_text(re.compile(r"other processes used \d+%")).first.inner_text()
        with page.expect_download() as download:
            page.get_by_role("button", name="Download trace (JSON)").click()
        path = Path(tempfile.mkdtemp()) / "trace.json"
        download.value.save_as(path)
        return json.loads(path.read_text()), {"shown": shown, "others": others, "click_to_finished_s": wall,
                                              "browser_cpu_s": browser_cpu}

    def close(self) -> None:
        self.chromium.close()
        self.playwright.stop()
        self.process.terminate()
        self.process.wait(30)


def _quarters(xs: list[float]) -> tuple[float, float]:
    n = max(1, len(xs) // 4)
    return statistics.median(xs[:n]), statistics.median(xs[-n:])


def _total(r: dict) -> float:
    return sum(r["times"][k] for k in ("draft", "verify", "accept", "rollback", "other"))


def decode_tok_s(run: dict) -> float:
    """Tokens over the rounds' compute, every round included, the prefill not: the page's
    "tok/s decoding" and the CLI's, measured alike on both sides."""
    return sum(len(r["emitted"]) for r in run["rounds"]) / sum(_total(r) for r in run["rounds"])


def compare(cli: dict, app: dict, page: dict) -> dict:
    """Figures of one budget: decode speed over every round (the first, which warms caches, included);
    the growth of round times over rounds 2.. ."""
    c_rounds, a_rounds = cli["rounds"][1:], app["rounds"][1:]
    same = [r["emitted"] for r in cli["rounds"]] == [r["emitted"] for r in app["rounds"]]
    total = _total
    c_ms, a_ms = [1e3 * total(r) for r in c_rounds], [1e3 * total(r) for r in a_rounds]
    first, last = _quarters([a / c for a, c in zip(a_ms, c_ms)] if same else a_ms)
    c_first, c_last = _quarters(c_ms)
    shown = float(re.search(r"([\d.]+) tok/s.{0,3} decoding", page["shown"]).group(1))
    others = float(re.search(r"other processes used (\d+)%", page["others"]).group(1)) / 100
    return {"tokens": app["summary"]["new_tokens"], "rounds": len(app["rounds"]), "same_rounds": same,
            "cli_tok_s": decode_tok_s(cli), "app_tok_s": decode_tok_s(app), "app_tok_s_shown": shown,
            "app_vs_cli": decode_tok_s(app) / decode_tok_s(cli),
            "cli_overall_tok_s": cli["summary"]["tokens_per_s"], "app_overall_tok_s": app["summary"]["tokens_per_s"],
            "others_share_shown": others,
            "cli_round_ms_median": statistics.median(c_ms), "app_round_ms_median": statistics.median(a_ms),
            # each app round over the same CLI round, last quarter of the run against the first
            "app_round_growth": last / first, "cli_round_growth": c_last / c_first,
            "app_round_ms": a_ms, "cli_round_ms": c_ms, "click_to_finished_s": page["click_to_finished_s"],
            # the browser's CPU time over the run (the final charts included), as a share of both cores
            "browser_cpu_s": page["browser_cpu_s"],
            "browser_cpu_share": page["browser_cpu_s"] / (2 * page["click_to_finished_s"])}


COMMAND = "python -m benchmarks.app_overhead"


def render(d: dict) -> str:
    """docs/results.md's block for one result: the app's decode speed against the CLI's per budget."""
    s = d["settings"]
    tok_s = ("decode tok/s, each run's own trace: tokens / the rounds' compute, the prefill excluded (the page's "
             "\"tok/s decoding\")" if d.get("tok_s") == "decode" else
             "tok/s is each run's own trace (tokens / (prefill + rounds))")
    out = ["#### The app against the CLI", "",
           f"{machine_line(d)}. Prompt {d['prompt']!r}, K = {s['k']}, confidence {s['confidence']}, T = "
           f"{s['temperature']}; {d['repeats']} CLI/app pairs per budget, interleaved; medians. {tok_s}; round growth is the median of the app's last quarter of rounds "
           "over its first, each divided by the same round of the CLI (1 = flat); the browser's CPU is the share of "
           "both cores Chromium used from the click to \"Finished\".", "",
           "| max new tokens | CLI tok/s | app tok/s | app / CLI | app round growth | browser CPU |",
           "|---:|---:|---:|---:|---:|---:|"]
    for n, v in d["summary"].items():
        share = v.get("browser_cpu_share")
        out.append(f"| {n} | {v['cli_tok_s']:.2f} | {v['app_tok_s']:.2f} | {v['app_vs_cli']:.2f}x "
                   f"| {v['app_round_growth']:.2f} | {'–' if share is None else f'{share:.0%}'} |")
    if "fresh_app_first_run" in d:
        f = d["fresh_app_first_run"]
        runs = f.get("runs", [f["app_vs_cli"]])
        out += ["", f"A freshly started app's first run ({f['budget']} tokens): **{f['app_vs_cli']:.2f}x** the CLI "
                f"(median of {len(runs)} fresh apps: {', '.join(f'{x:.2f}x' for x in runs)}); the slowest app run of "
                f"all: {d['worst_app_vs_cli']:.2f}x."]
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompt", default=PROMPT)
    ap.add_argument("--tokens", type=int, nargs="+", default=[128, 256])
    ap.add_argument("--repeats", type=int, default=2, help="CLI/app pairs per budget per app, interleaved (default 2)")
    ap.add_argument("--apps", type=int, default=2,
                    help="freshly started apps, one after another (default 2): each one's first run is a fresh app's")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    log = lambda *a: print(*a, file=sys.stderr, flush=True)  # noqa: E731
    results, first_cli = [], None
    for i in range(args.apps):
        app = App(log)
        try:
            for rep in range(args.repeats):
                for n in args.tokens:  # CLI then app, in turn: both see the same state of the machine
                    cli = cli_run(args.prompt, n)
                    first_cli = first_cli or cli
                    trace, page = app.run(args.prompt, n)
                    # each app's first run is a fresh app's first: whatever a first run pays is in the figures
                    results.append({"app": i, "repeat": rep, "budget": n,
                                    "fresh_app_first_run": rep == 0 and n == args.tokens[0],
                                    **compare(cli, trace, page)})
                    r = results[-1]
                    log(f"app {i + 1}, {n} tokens{' (its first run)' if r['fresh_app_first_run'] else ''}: cli "
                        f"{r['cli_tok_s']:.2f} tok/s, app {r['app_tok_s']:.2f} ({r['app_vs_cli']:.2f}x), round growth "
                        f"app {r['app_round_growth']:.2f}, cli {r['cli_round_growth']:.2f}; browser CPU "
                        f"{r['browser_cpu_s']:.1f} s ({r['browser_cpu_share']:.0%} of 2 cores)")
        finally:
            app.close()
    summary = {str(n): {key: statistics.median(r[key] for r in results if r["budget"] == n)
                        for key in ("app_vs_cli", "app_round_growth", "cli_round_growth", "cli_tok_s", "app_tok_s",
                                    "browser_cpu_share")}
               for n in args.tokens}
    firsts = [r["app_vs_cli"] for r in results if r["fresh_app_first_run"]]
    first = {"budget": args.tokens[0], "app_vs_cli": statistics.median(firsts), "runs": firsts}
    from specdec.model.precision import cpu_description
    env = _environment(first_cli["settings"], first_cli["precision_reason"])
    out = Path(args.out or ROOT / "benchmarks" / "results" / f"app_overhead-{env['cpu_slug']}.json")
    write_json(out, {"benchmark": "app_overhead", **env, "cpu_description": cpu_description(),
                     "prompt": args.prompt, "settings": first_cli["settings"], "repeats": args.repeats, "apps": args.apps,
                     "tok_s": "decode", "summary": summary, "fresh_app_first_run": first,
                     "worst_app_vs_cli": min(r["app_vs_cli"] for r in results), "results": results})
    for n, v in summary.items():
        log(f"{n} tokens, median: app/CLI {v['app_vs_cli']:.2f}x, app round growth {v['app_round_growth']:.2f}, "
            f"browser {v['browser_cpu_share']:.0%} of 2 cores")
    log(f"a fresh app's first run ({first['budget']} tokens), median of {len(firsts)}: app/CLI "
        f"{first['app_vs_cli']:.2f}x")
    log(f"wrote {out}")
    return 0


def _environment(settings: dict, reason: str) -> dict:
    """The common record without loading models here (both runs load their own)."""
    from types import SimpleNamespace

    import torch

    from benchmarks.common import environment
    from specdec.model.precision import Precision
    draft = settings.get("draft_precision")
    pair = SimpleNamespace(device=torch.device(settings["device"]),
                           precision=Precision.from_label(settings["precision"], reason), draft_precision=Precision.from_label(draft) if draft else None)
    return environment(pair)


if __name__ == "__main__":
    sys.exit(main())
