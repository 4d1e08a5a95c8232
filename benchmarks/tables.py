"""The pieces of Markdown the benchmarks' ``render`` functions share: a number's format, the line
naming the machine a result ran on, the table of a fitted forward cost t(L) = t_f + t_r·L, and the
anchor GitHub gives a heading. ``benchmarks/report.py`` writes what the renders return into the pages."""
from __future__ import annotations

import re

from benchmarks.common import cpu_id


def fmt(x, kind: str) -> str:
    """``x`` as a speed-up ("x"), a share ("%") or a plain figure ("f"); a dash where there is none."""
    if x is None or (isinstance(x, float) and x != x):
        return "–"
    return {"x": f"{x:.2f}x", "%": f"{x:.0%}", "f": f"{x:.2f}"}[kind]


def anchor(heading: str) -> str:
    """The id GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def machine_line(d: dict) -> str:
    """The machine, precision, versions and commit a result was measured with, in one sentence."""
    hw, v = d["hardware"], d["versions"]
    return (f"{cpu_id(hw)} ({', '.join(hw['cpu_flags']) or 'no AVX2'}), {hw['torch_threads']} threads, "
            f"{d['device']}, precision {d['precision']}; torch {v['torch']}, transformers {v['transformers']}; "
            f"commit `{d['commit']}`, {d['date'][:10]}{' (quick run)' if d.get('quick') else ''}")


def estimator(record: dict) -> str:
    """How a result reduced each point's repeated forwards to one time, as its JSON names it
    (:data:`specdec.model.timing.ESTIMATOR`); results written before it was named took the median."""
    return record.get("estimator", "median")


def measured_ms(fit: dict) -> dict[int, float]:
    """{L: ms} a fitted forward cost was fitted to (``ms``; ``median_ms`` in results written before
    the estimator was named)."""
    return dict(zip(fit["lengths"], fit["ms"] if "ms" in fit else fit["median_ms"]))


def fit_rows(costs: dict, k: int) -> list[str]:
    """One row per fit: t_f, t_r, R^2, and the measured times at L = 1, K+1 and the longest L, so a
    reader sees where the line does not fit."""
    some = next(iter(costs.values()))
    show = sorted({1, k + 1, some["lengths"][-1]} & set(some["lengths"]))
    out = ["| engine, model | t_f (fixed ms) | t_r (ms per row) | R² | t_f / (t_f + t_r) | fitted K+1 vs 1 | "
           + " | ".join(f"measured L = {n}" for n in show) + " |", "|---|" + "---:|" * (5 + len(show))]
    for name, f in costs.items():
        one = f["a_ms"] + f["b_ms_per_token"]
        measured = measured_ms(f)
        out.append(f"| {name} | {f['a_ms']:.1f} | {f['b_ms_per_token']:.2f} | {f['r2']:.3f} "
                   f"| {fmt(f['a_ms'] / one if one > 0 else None, '%')} | {fmt(f.get(f'verify_vs_decode_k{k}'), 'x')} | "
                   + " | ".join(f"{measured[n]:.0f} ms" for n in show) + " |")
    return out
