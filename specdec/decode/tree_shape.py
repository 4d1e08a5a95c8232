"""Which tree the ``tree`` drafter drafts by default: chosen from this machine's costs.

A tree of N nodes keeps more tokens per round than a chain of depth K, and costs more to verify:
a verifier forward over L rows costs about t(L) = t_f + t_r L (docs/notation.md), and t_r differs
tenfold between CPUs (AVX2 against AVX-512 with VNNI or AMX). So the default shape is a prediction
per machine, of the speed a run reports (its decoding tok/s: tokens / the rounds' compute):

    predicted tok/s (W, N) = tokens per round (W, N) / ms per round (W, N), where
    ms per round = draft time (W, N) + t_f + t_r (nodes + 1) + the round's work besides the forwards

- *tokens per round*, nodes verified and draft rows per round, per shape and temperature, are
  counts measured once for the embedded pair by ``python -m benchmarks.trees`` and shipped as
  ``tree_shapes.json`` (they do not depend on the machine);
- t_f, t_r (verifier, tree rows) and the draft's cost per forward and per row are timed once on
  this machine (the fastest of a few forwards per row count, :func:`specdec.model.timing.time_forward`, fitted
  by :func:`specdec.model.timing.fit_line`),
  and so is the rest of a round (drafting's sampling and reads, accept/reject, keeping the path, the
  trace: the median over a short real run's rounds of their time outside the model forwards). Cached,
  like the kernel calibration (a few seconds).

Width 1 is the chain, drafted by the chain drafter itself (the same code and speed): where verifying
more rows costs more than the extra tokens repay, the default tree is the chain, and
``--drafter tree`` is never slower than ``--drafter model`` by default. Without measured counts
for the pair (another model), the default is the chain too.
"""
from __future__ import annotations

import json
import statistics
import threading
from dataclasses import replace
from pathlib import Path

import torch

from specdec.decode.drafters import ModelDrafter, NoDrafter
from specdec.decode.engine import Generation
from specdec.decode.tree import TreeDrafter, require_lean, verifier_attention
from specdec.model.devices import Clock
from specdec.model.timing import filler_ids, fit_line, time_forward
from specdec.options import DecodeConfig, SamplingConfig

SHAPES_FILE = Path(__file__).with_name("tree_shapes.json")
FIT_ROWS = (1, 7, 13, 25)      # verifier rows timed for the fit
DRAFT_ROWS = (1, 4)
# cached tokens behind the timed rows: a chat prompt of a sentence (about 70 tokens with its template)
# and half of a default answer, the middle of what a run's rounds read
CONTEXT = 100
# timed forwards per row count, the fastest kept: the prediction is a quiet machine's, and a median
# timed on a busy one would stay wrong in the cache
REPS = 5
# the tree shapes measured for tree_shapes.json (benchmarks/trees.py), and those an adaptive run weighs
WIDTHS, BUDGETS = (2, 3), (8, 12, 20)
OVERHEAD_SHAPES = ((1, 6), (2, 8))  # (W, N) of the short runs whose rounds give the work besides the forwards
_MEASURING = threading.Lock()


def _round_overhead_ms(pair, ids: list[int]) -> tuple[float, list[float]]:
    """A round's time outside the model forwards (drafting's sampling and host reads, accept/reject,
    keeping the path, recording), as the run's phase times measure it: the median over the rounds of a
    short chain run and a short tree run; and the line rest = r_0 + r_d * drafted fitted over those
    rounds and a short verifier-only run's (a plain step's rest is a few ms, a round of 6 drafts'
    several times that: the adaptive pacer weighs each K with its own)."""
    rests = []  # (drafted, ms besides the forwards) per round; each run's first round holds the prompt's setup
    for width, nodes in ((1, 0),) + OVERHEAD_SHAPES:
        drafter = (NoDrafter(pair.vocab_size, pair.device) if not nodes else
                   ModelDrafter(pair.draft, pair.vocab_size, Clock(pair.device), pair.stop_ids) if width == 1 else
                   TreeDrafter(pair.draft, pair.vocab_size, Clock(pair.device), width, nodes, pair.stop_ids))
        cfg = DecodeConfig(max_new_tokens=24, k=nodes if width == 1 and nodes else 6, tree_width=width,
                           tree_nodes=nodes or 8, ignore_eos=True)
        gen = Generation(pair, ids, cfg, drafter).run()
        rests += [(r.drafted, 1e3 * (r.times.total - r.times.forward)) for r in gen.rounds[1:]]
    r0, rd = fit_line([float(n) for n, _ in rests], [ms for _, ms in rests])
    return statistics.median(ms for n, ms in rests if n), [max(r0, 0.0), max(rd, 0.0)]


def measure_costs(pair) -> dict:
    """Time the verifier over tree rows and the draft over batched rows on this machine, and a round's
    work besides them: {"verify": [t_f, t_r], "draft": [t_f, t_r], "round": ms} in ms (t_f per forward,
    t_r per row, "round" per round)."""
    with pair.lock:  # the app's sessions share the models: no session's round beside the timed work
        out = _forward_costs(pair)
        out["round"], out["rest_line"] = _round_overhead_ms(pair, filler_ids(pair.vocab_size, CONTEXT))
    return out


def _forward_costs(pair) -> dict:
    """{"verify": [t_f, t_r], "draft": [t_f, t_r]} and the timings they were fitted to, in ms: the verifier
    over a binary tree of each row count in FIT_ROWS (row by row, as it verifies), the draft over each
    row count in DRAFT_ROWS (one fused call, as it drafts a depth)."""
    out = {}
    for role, model, rows in (("verify", pair.target, FIT_ROWS), ("draft", pair.draft, DRAFT_ROWS)):
        def attention(n: int, exact: bool = role == "verify"):
            parents = tuple([-1] + [(j - 1) // 2 for j in range(1, n)])  # a binary tree of n rows
            return replace(verifier_attention(parents, CONTEXT), exact=exact)
        ms = time_forward(model, rows, CONTEXT, REPS, vocab=pair.vocab_size, attention=attention)
        t_f, t_r = fit_line(rows, [ms[n] for n in rows])
        out[role] = [max(t_f, 0.0), max(t_r, 0.0)]  # a cost is never negative; only noise makes a fit say so
        out[f"{role}_ms"] = {str(n): ms[n] for n in rows}
    return out


COSTS_VERSION = 4  # raised when the forward or the measure changes (2: each layer one C++ call; 3: the rest as a line; 4: decoding under glibc heap settings that reuse a round's temporaries): older timings are not read


def machine_costs(pair) -> dict:
    """``measure_costs`` once per machine, models and kernels, then from the cache. One measurement at
    a time: a second caller (the app's background timing and a first tree run) waits and reads the cache."""
    from specdec.model.calibration import cached
    from specdec.model.precision import cpu_description
    key = ["tree-costs-per-round", COSTS_VERSION, pair.target_name, pair.draft_name, pair.precision.label,
           pair.draft_precision.label if pair.draft_precision else ""]
    with _MEASURING:
        return cached(key, cpu_description(), lambda: {"timings_ms": measure_costs(pair)})


def measured_shapes(pair) -> dict | None:
    """The shipped counts for this pair, or None."""
    try:
        data = json.loads(SHAPES_FILE.read_text())
    except (OSError, ValueError):
        return None
    if data.get("pair") != [pair.target_name, pair.draft_name]:
        return None
    return data


def predict(shapes: list[dict], costs: dict) -> list[dict]:
    """Each shape's predicted tokens per second from its counts and this machine's costs."""
    (va, vb), (da, db) = costs["verify"], costs["draft"]
    rest = costs.get("round", 0.0)  # the round's work besides the forwards; a what-if of forwards alone leaves it out
    out = []
    for s in shapes:
        ms = s["draft_forwards"] * da + s["draft_rows"] * db + va + vb * (s["nodes"] + 1) + rest
        out.append({**s, "predicted_ms": ms, "predicted_tok_s": 1e3 * s["tokens_per_round"] / ms})
    return out


def choose(shapes: list[dict], costs: dict, k: int) -> tuple[int, int, str]:
    """(W, N, why): the best predicted shape at depth k; the chain when it predicts best. ``why`` is
    written for a learner: the prediction of the shape that runs against the best of the other kind."""
    mine = [s for s in predict(shapes, costs) if s["k"] == k]
    if not mine:
        return 1, k, f"W = 1, N = {k}, the chain: no tree shapes were measured at K = {k}"
    best = max(mine, key=lambda s: s["predicted_tok_s"])
    chain = best["width"] == 1
    others = [s for s in mine if (s["width"] > 1) == chain]
    va, vb = costs["verify"]
    verify, rest = va + vb * (best["nodes"] + 1), costs.get("round", 0.0)
    fit = (f"predicted {best['predicted_tok_s']:.1f} tok/s for it on a quiet machine, from this machine's timed "
           "forwards and rounds "
           "(the speed a run reports as its decoding tok/s: tokens / the rounds' compute) = "
           f"{best['tokens_per_round']:.2f} tokens per round (counted for these models by benchmarks/trees.py) / "
           f"{best['predicted_ms']:.0f} ms per round (drafting {best['predicted_ms'] - verify - rest:.0f} ms, "
           f"the verifier forward {verify:.0f} ms = {va:.0f} + {vb:.1f} ms per row × {best['nodes'] + 1:.1f} rows, the "
           f"rest of the round {rest:.0f} ms)")
    if not others:
        against = ""
    elif chain:
        tree = max(others, key=lambda s: s["predicted_tok_s"])
        against = (f", against {tree['predicted_tok_s']:.1f} tok/s for the best tree (W = {tree['width']}, "
                   f"N = {tree['budget']}): verifying a tree's extra rows costs more than its extra tokens repay")
    else:
        chain_tok_s = max(s["predicted_tok_s"] for s in others)
        against = f", against {chain_tok_s:.1f} tok/s for the chain: its extra tokens repay verifying its extra rows"
    shape = f"W = 1, N = {best['budget']}, the chain" if chain else f"W = {best['width']}, N = {best['budget']}"
    return best["width"], best["budget"], f"{shape}: {fit}{against}"


def default_shape(pair, k: int = 6, sampling: SamplingConfig | None = None) -> tuple[int, int, str]:
    """The tree drafter's (W, N, why) when the run leaves them at 0."""
    data = measured_shapes(pair)
    if data is None:
        return 1, k, f"W = 1, N = {k}, the chain: no tree shapes were measured for this pair of models"
    temperature = "0" if sampling is None or sampling.greedy else "sampled"
    with torch.inference_mode():
        return choose(data["shapes"].get(temperature, []), machine_costs(pair), k)


def candidates(cfg: DecodeConfig) -> tuple[tuple[int, int], ...]:
    """The tree shapes (W, N) an adaptive run weighs before each round besides the chains
    (:mod:`specdec.decode.pacing`): those of WIDTHS x BUDGETS within the run's W and N (0: any), and
    that shape itself; none where W is 1."""
    width, nodes = cfg.tree_width or max(WIDTHS), cfg.tree_nodes or max(BUDGETS)
    grid = {(w, n) for w in WIDTHS for n in BUDGETS if w <= width and n <= nodes} | {(width, nodes)}
    return tuple(sorted(grid)) if width > 1 else ()


def resolve(pair, cfg: DecodeConfig) -> tuple[DecodeConfig, str]:
    """``cfg`` with its tree shape filled in (what actually runs), and why that shape: the one place
    the shape is decided, before the run (:func:`specdec.decode.start.start`), so that
    every entry point records the shape that ran. An adaptive run records the largest shape it may
    choose, of which :func:`candidates` gives back the same shapes."""
    require_lean(pair)
    if cfg.adaptive:
        shapes = candidates(cfg)
        ran = replace(cfg, tree_width=max((w for w, _ in shapes), default=1),
                      tree_nodes=max((n for _, n in shapes), default=cfg.k))
        trees = "; ".join(f"W = {w}, N = " + ", ".join(str(n) for v, n in shapes if v == w)
                          for w in sorted({w for w, _ in shapes})) or "none (W = 1)"
        return ran, (f"chosen before each round by Adaptive K, from this run's acceptance and this machine's timed "
                     f"costs: a plain verifier step, a chain of up to K = {cfg.k} drafts or a tree ({trees})")
    if cfg.tree_width and cfg.tree_nodes:
        return cfg, f"W = {cfg.tree_width}, N = {cfg.tree_nodes}: requested"
    width, nodes, why = default_shape(pair, cfg.k, cfg.sampling)
    ran = replace(cfg, tree_width=cfg.tree_width or width, tree_nodes=cfg.tree_nodes or nodes)
    if cfg.tree_width or cfg.tree_nodes:  # one of the two asked for: say so, and what the fit would pick
        asked = "W" if cfg.tree_width else "N"
        why = (f"W = {ran.tree_width}, N = {ran.tree_nodes}: {asked} as requested, the other as this machine's choice "
               f"(alone it would pick {why})")
    return ran, why
