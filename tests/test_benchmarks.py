"""The benchmark scripts end to end on tiny random models (``--tiny --quick``): each writes its JSON
with the environment record next to the numbers, and the numbers have the ranges and shapes a
reader of the JSON relies on. The values themselves measure nothing on models this small."""
from __future__ import annotations

import importlib.util
import json
import math

import pytest
import torch

from benchmarks import (
    app_overhead,
    draft_bits,
    first_run,
    gpu_costs,
    levers,
    profile,
    race,
    report,
    runtime_compare,
    sweep,
    throughput,
    tiny_pair,
    trees,
)
from benchmarks.chromium import find_chromium
from benchmarks.common import ROOT, cpu_label, machine_slug
from specdec.model.precision import cpu_variants
from specdec.model.timing import ESTIMATOR

# a tiny model's forward takes about a millisecond: a second thread costs more than it saves
pytestmark = pytest.mark.usefixtures("one_thread")


def run_script(module, tmp_path, *flags: str) -> dict:
    out = tmp_path / "x.json"
    assert module.main(["--tiny", "--quick", *flags, "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    for key in ("hardware", "commit", "precision", "versions"):
        assert data[key], key
    assert data["hardware"]["cpu"] and data["versions"]["torch"] == torch.__version__
    assert data["tiny"] and data["quick"]
    return data


def test_sweep_writes_cells_in_range_and_the_heatmaps(tmp_path):
    data = run_script(sweep, tmp_path)
    cells = data["cells"]
    grid = {(k, t) for k in sweep.QUICK_KS for t in sweep.QUICK_TEMPERATURES}
    assert {(c["k"], c["temperature"]) for c in cells} == grid and len(cells) == len(grid)
    for c in cells:
        assert 0 <= c["acceptance"] <= 1 and 0 <= c["mean_beta"] <= 1
        assert len(c["per_position_acceptance"]) == c["k"]
        assert all(0 <= a <= 1 for a in c["per_position_acceptance"])
        assert 1 <= c["tokens_per_round"] <= c["k"] + 1
        assert c["tok_s"] > 0 and c["speedup"] > 0
    # At T = 0 p and q are one-hot, so beta is 1 exactly where the drafted token is kept; with K = 1
    # every draft is tested, so the mean beta is the acceptance.
    greedy_k1 = next(c for c in cells if c["k"] == 1 and c["temperature"] == 0)
    assert greedy_k1["mean_beta"] == pytest.approx(greedy_k1["acceptance"])
    assert set(data["baseline_tok_s"]) == {f"{t:g}" for t in sweep.QUICK_TEMPERATURES}

    figures = data["figures"]
    assert (tmp_path / figures["html"]).is_file()
    assert (figures["png"] is None) == bool(figures["png_why_not"])
    if importlib.util.find_spec("kaleido") and find_chromium():  # as `make test` installs them
        assert figures["png"] and (tmp_path / figures["png"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    acceptance = sweep.heatmaps(cells, sweep.QUICK_KS, sweep.QUICK_TEMPERATURES, "").data[0]
    assert (acceptance.zmin, acceptance.zmax) == (0, 1)
    assert all(0 <= z <= 1 for row in acceptance.z for z in row)


def test_trees_sweep_compares_each_shape_with_the_chain_and_predicts_a_default(tmp_path):
    data = run_script(trees, tmp_path)
    cells = data["cells"]
    assert {(c["temperature"], c["kind"]) for c in cells} == {(t, k) for t in ("0", "sampled") for k in ("code", "prose")}
    for c in cells:
        assert 1 <= c["tokens_per_round"] <= data["settings"]["k"] + 1
        assert c["nodes"] <= max(c["budget"], data["settings"]["k"])
        assert c["tok_s"] > 0 and c["speedup_vs_chain"] > 0
        if c["temperature"] == "0":
            assert c["identical_to_verifier"]        # greedy trees and chains give the verifier's output
        if c["width"] == 1:
            assert c["speedup_vs_chain"] == 1.0
    assert set(data["shapes"]) == {"0", "sampled"}
    assert all("predicted_tok_s" in x for xs in data["shapes"].values() for x in xs)
    assert all(math.isfinite(x) for x in data["costs"]["verify"] + data["costs"]["draft"])  # tiny: noise, any sign
    assert (data["settings"]["context"], data["settings"]["estimator"]) == (trees.CONTEXT, ESTIMATOR)
    text = trees.render(data)
    assert f"fitted on a {trees.CONTEXT}-token context" in text
    assert "speed-up vs chain" in text and "best predicted shape" in text


def test_profile_accounts_for_wall_time_and_fits_the_forward_cost_of_each_kernel(tmp_path):
    data = run_script(profile, tmp_path, "--kernels")
    assert set(data["runs"]) == set(profile.DRAFTERS)
    for r in data["runs"].values():
        assert sum(r["phase_s"].values()) == pytest.approx(r["wall_s"])
        assert 0 <= r["overhead_share"] <= 1
        assert r["forward_share"] + r["overhead_share"] == pytest.approx(1)
    lengths = data["settings"]["lengths"]
    assert lengths == list(range(1, 9)) and data["settings"]["estimator"] == ESTIMATOR
    for role in ("verifier", "draft"):
        f = data["forward_cost"][role]
        # A tiny model's forward is mostly fixed overhead and machine noise: a and b need not be
        # positive here, only finite, with R^2 reported.
        assert math.isfinite(f["a_ms"]) and math.isfinite(f["b_ms_per_token"])
        assert math.isfinite(f["r2"]) and f["r2"] <= 1
        assert len(f["ms"]) == len(lengths)
        r = data["roofline"][role]
        assert r["weight_bytes"] > 0 and r["weights"] > 0 and r["precision"] == data["precision"]
        assert len(r["bandwidth_gb_s"]) == 3 and set(r["rows"]) == set(r["gmac_s"]) == {"1", "7"}  # a probe after each fit
        for n, x in r["rows"].items():  # the definition, on whatever this run measured
            assert x["memory_ms"] == pytest.approx(r["weight_bytes"] / max(r["bandwidth_gb_s"]) / 1e6)
            assert x["bound_ms"] == max(x["memory_ms"], x["compute_ms"] or 0)
            assert x["measured_ms"] == f["ms"][lengths.index(int(n))] and x["ratio"] == x["measured_ms"] / x["bound_ms"]
    # --kernels: every integer variant here fitted for both models, or left out and named
    kernels, integer = data["kernels"], {v.label for v in cpu_variants() if v.name in ("int8", "int4")}
    for role in ("verifier", "draft"):
        assert set(kernels[role]) | set(kernels["left out"]) == integer and set(kernels[role])
        for f in kernels[role].values():
            assert f["lengths"] == lengths and len(f["ms"]) == len(lengths) and f["weight_bytes"] > 0
            assert math.isfinite(f["a_ms"]) and math.isfinite(f["b_ms_per_token"]) and f["r2"] <= 1
    text = profile.render(data)
    assert "Per kernel variant" in text
    assert all(f"| {role}, {label} | " in text for role in ("verifier", "draft") for label in kernels[role])


def test_draft_bits_measures_acceptance_per_bit_width_and_predicts_from_the_bytes(tmp_path):
    data = run_script(draft_bits, tmp_path)
    assert set(data["results"]) == {"code", "prose"}
    for rows in data["results"].values():
        assert [r["bits"] for r in rows.values()] == [4, *draft_bits.BITS]
        for r in rows.values():
            assert 0 <= r["acceptance"] <= 1 and len(r["per_position"]) == data["settings"]["k"]
            p = r["prediction"]
            assert 0 <= p["best_k"] <= data["settings"]["k"] and p["tok_s"] > 0 and p["vs_int4"] > 0
            assert p["draft_ms"] == pytest.approx(data["costs_ms"]["draft"] * r["bytes_vs_int4"])
    assert draft_bits.bytes_ratio(4) == 1 and draft_bits.bytes_ratio(2) == pytest.approx(0.6)
    w = torch.randn(8, 64)
    for bits in (4, 3, 2):  # 2**bits levels per group of 32: a group holds at most that many values
        q = draft_bits.quantize(w, bits)
        assert max(len(set(g.tolist())) for g in q.reshape(-1, 32)) <= 2 ** bits
        assert (q - w).abs().max() <= (w.max() - w.min()) / (2 ** bits - 1)
    assert "predicted" in draft_bits.render(data)


def test_roofline_bound_is_the_slower_of_reading_the_weights_and_computing_with_them():
    from benchmarks.roofline import bound
    # 2 GB at 20 GB/s: 100 ms to read; 1e9 weights at 1 row and 100 GMAC/s: 10 ms; at 7 rows and 50: 140 ms
    r = bound(2e9, 10**9, 20.0, {1: 100e9, 7: 50e9, 16: None}, {1: 150.0, 7: 168.0})
    assert (r["1"]["bound_ms"], r["1"]["bound_by"], r["1"]["ratio"]) == pytest.approx((100.0, "memory", 1.5))
    assert (r["7"]["bound_ms"], r["7"]["bound_by"], r["7"]["ratio"]) == pytest.approx((140.0, "compute", 1.2))
    assert r["16"]["compute_ms"] is None and r["16"]["bound_ms"] == 100.0 and r["16"]["ratio"] is None


def test_fit_recovers_a_line_and_tolerates_flat_timings():
    lengths = list(range(1, 9))
    f = profile.fit(lengths, [2.0 + 0.5 * n for n in lengths], k=6)
    assert (f["a_ms"], f["b_ms_per_token"], f["r2"]) == pytest.approx((2.0, 0.5, 1.0))
    assert f["verify_vs_decode_k6"] == pytest.approx((2.0 + 0.5 * 7) / 2.5)
    flat = profile.fit(lengths, [1.0] * len(lengths), k=6)
    assert (flat["a_ms"], flat["b_ms_per_token"], flat["r2"]) == pytest.approx((1.0, 0.0, 1.0), abs=1e-9)


def test_throughput_writes_every_method_group_and_headline_the_report_reads(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "cache"))  # the adaptive run times this machine's costs once
    data = run_script(throughput, tmp_path)
    s, n = data["settings"], data["settings"]["max_new_tokens"]
    assert (len(s["code_prompts"]), len(s["prose_prompts"])) == (2, 1) and s["transformers_prompts"] == s["code_prompts"]
    assert len(set(s["code_prompts"] + s["prose_prompts"])) == 3  # the runs are told apart by their prompt
    for key in ("llama_cpp", "llama_cpp_speculative", "peak_memory"):
        assert data[key].startswith("--tiny: ")  # not measured, and why
    assert data["fidelity"]["not measured"].startswith("--tiny: ")

    ours = [throughput.VERIFIER_ONLY, throughput.SPECULATIVE, throughput.ADAPTIVE, "speculative, prompt lookup (ours)",
            "speculative, hybrid: lookup, else model (ours)"]
    sampled = ["verifier only, T=0.7 top-p 0.95 (ours)", "speculative, T=0.7 top-p 0.95 (ours)"]
    hf = ["transformers greedy", "transformers assisted (its defaults)"]
    fastest = [m for m in dict.fromkeys(r["method"] for r in data["runs"]) if m.endswith("(the fastest verifier-only here)")]
    # the verifier alone in the representation fastest at one row, where that is not the pair's own
    assert len(fastest) <= 1 and f"verifier only, {data['precision']} (the fastest verifier-only here)" not in fastest
    assert data["fastest_verifier_only"] in [throughput.VERIFIER_ONLY] + fastest
    prompts = {m: s["code_prompts"] + s["prose_prompts"] for m in ours + fastest}
    prompts |= {m: s["code_prompts"] for m in sampled} | {m: s["transformers_prompts"] for m in hf}
    assert sorted((r["method"], r["prompt"]) for r in data["runs"]) == sorted((m, p) for m, ps in prompts.items() for p in ps)
    for r in data["runs"]:
        assert 1 <= r["tokens"] <= n and len(r["token_ids"]) == r["tokens"] and r["tok_s"] > 0
        if r["method"] in ours[1:] + sampled[1:]:
            assert 0 <= r["acceptance"] <= 1 and 1 <= r["tokens_per_round"] <= s["k"] + 1
            assert 0 <= r["overhead_share"] <= 1 and (r["draft_vs_verify"] is None or r["draft_vs_verify"] > 0)

    summary = data["summary"]
    assert list(summary) == ["code", "prose", throughput.SAMPLED_GROUP]
    assert set(summary["code"]) == set(ours + fastest + hf) and set(summary["prose"]) == set(ours + fastest)
    assert set(summary[throughput.SAMPLED_GROUP]) == set(sampled)
    for group in ("code", "prose"):  # greedy speculation is lossless: the verifier's very tokens
        assert all(summary[group][m]["identical_to_base"] for m in ours)
    for group in summary.values():
        assert all(e["speedup_geomean"] > 0 for e in group.values())
    headline = data["headline"]
    assert headline["peak resident memory, default run (GiB)"] is None
    assert 0 <= headline["time outside model forwards, speculative"] <= 1
    assert all(v > 0 for k, v in headline.items() if k.startswith(("speculative vs", "adaptive K vs", "draft / verify")))
    assert any(k.startswith("speculative vs best transformers assisted") for k in headline)
    assert not any("llama.cpp" in k for k in headline)
    text = throughput.render(data)
    assert "llama.cpp: --tiny: " in text and f"| {throughput.ADAPTIVE} | " in text
    table = throughput.render_headline([data])
    assert "| greedy output = verifier-only's, code and prose | yes |" in table
    assert "| peak memory, default run | – GiB |" in table
    assert "| speculative vs llama.cpp greedy | not measured |" in table


def test_levers_time_each_draft_variant_and_the_one_call_layer_against_op_by_op(tmp_path):
    data = run_script(levers, tmp_path)
    default, verifier = data["draft_precision"], data["precision"]
    variants = [v.label + (" (default)" if v.label == default else "") for v in cpu_variants() if not v.transposed]
    drafts = variants + [f"{default}, output layer cut to {levers.TINY_CUT} ids", f"{default}, batch-invariant (as a verifier)"]
    # the op-by-op twin of a model whose layers run as one call (specdec's kernels): {its row: its name where not measured}
    twins = {f"draft, lean forward, {default}, each layer op by op (not one call)":
             f"draft, {default}, each layer op by op",
             f"verifier, lean forward, {verifier}, each layer op by op": f"verifier, {verifier}, each layer op by op"}
    one_call = verifier.endswith(" specdec")
    assert verifier == default and one_call == tiny_pair.load_pair().target.one_call
    expected = {f"draft, lean forward, {label}" for label in drafts}
    expected |= {f"verifier, lean forward, {verifier}, each layer one call (default)"} if one_call else set()
    assert set(data["draft_forward_ms"]) == expected | (set(twins) if one_call else set())
    assert data["not_measured"] == ({} if one_call else {name: levers.NO_ONE_CALL for name in twins.values()})
    assert all(set(ms) == {"1", "7"} and min(ms.values()) > 0 for ms in data["draft_forward_ms"].values())
    assert data["forward_ms"] == {} and data["compile"] is None  # --quick; no --compile

    st = data["end_to_end_settings"]
    assert len(st["prompts"]) == 2 and st["temperature"] == 0.0
    e2e = data["end_to_end"]
    decoded = {f"draft {label}" for label in drafts[:-1] if not label.startswith("float32")}  # not the batch-invariant
    decoded |= {f"draft {default}, each layer op by op (not one call)"} if one_call else set()
    assert set(e2e) == {"verifier only", "hybrid drafter (lookup, else the default draft)",
                        "default draft, q and confidence per token at T = 0 (no fast path)"} | decoded
    assert e2e["verifier only"]["acceptance"] is None and e2e["verifier only"]["tokens_per_round"] == 1
    for label, e in e2e.items():
        assert e["identical_to_verifier_only"], label  # greedy speculation is lossless, whatever drafts
        assert e["tok_s"] > 0 and 1 <= e["tokens_per_round"] <= st["k"] + 1
        assert e["acceptance"] is None or 0 <= e["acceptance"] <= 1
    text = levers.render(data)
    assert all(f"| {name} | {ms['1']:.1f} | {ms['7']:.1f} |" in text for name, ms in data["draft_forward_ms"].items())
    assert all(f"| {name} | {e['tok_s']:.2f} |" in text for name, e in e2e.items())


def test_runtime_compare_records_why_llama_cpp_is_absent_and_still_measures_ours(tmp_path):
    data = run_script(runtime_compare, tmp_path)
    assert data["llama_cpp"] is None and "tiny" in data["why"]
    assert data["forward_cost"]["llama.cpp"] is None and data["vs_llama_cpp_greedy"] is None
    assert set(data["tok_s"]) == {f"ours: {name}" for name in profile.DRAFTERS}
    assert all(v > 0 for v in data["tok_s"].values())
    assert math.isfinite(data["forward_cost"]["ours"]["verifier"]["a_ms"])
    assert data["settings"]["estimator"] == ESTIMATOR


def test_report_renders_each_benchmark_with_its_machine_and_numbers(tmp_path):
    blocks = {}
    for module in (sweep, profile, runtime_compare):
        (tmp_path / module.__name__).mkdir()
        data = run_script(module, tmp_path / module.__name__)
        assert report.renderer(data["benchmark"]) is module
        assert module.COMMAND.endswith(f"benchmarks.{data['benchmark']}")
        blocks[data["benchmark"]] = (data, module.render(data))
    for data, text in blocks.values():
        assert data["hardware"]["cpu"] in text and data["commit"] in text and data["precision"] in text
    data, text = blocks["sweep"]
    at = {(c["k"], c["temperature"]): c for c in data["cells"]}
    for t in data["settings"]["temperatures"]:
        assert f"{data['baseline_tok_s'][f'{t:g}']:.2f} tok/s at T = {t:g}" in text
        # one row per temperature in each table: acceptance, beta, tokens per round, speedup
        assert f"\n| {t:g} | " + " | ".join(f"{at[k, t]['acceptance']:.0%}" for k in data["settings"]["ks"]) in text
        assert f"\n| {t:g} | " + " | ".join(f"{at[k, t]['speedup']:.2f}x" for k in data["settings"]["ks"]) in text
    assert data["figures"]["html"] in text
    data, text = blocks["profile"]
    assert all(f"| {name} | {r['tok_s']:.2f} |" in text for name, r in data["runs"].items())
    f = data["forward_cost"]["verifier"]
    assert f"| verifier | {f['a_ms']:.1f} | {f['b_ms_per_token']:.2f} | {f['r2']:.3f} |" in text
    assert f"| {f['ms'][0]:.0f} ms |" in text and f"({ESTIMATOR} of {data['settings']['reps']} reps)" in text
    data, text = blocks["runtime_compare"]
    assert "llama.cpp not measured: --tiny" in text
    assert all(f"| {name} | {v:.2f} |" in text for name, v in data["tok_s"].items())


def test_llama_speculative_log_is_read_as_it_prints_it():
    from benchmarks.throughput import parse_speculative_log
    log = ("main: encoded   31 tokens in    0.412 seconds, speed:   75.239 t/s\n"
           "main: decoded  129 tokens in    5.861 seconds, speed:   22.010 t/s\n\nn_draft   = 6\n"
           "n_predict = 129\nn_drafted = 132\nn_accept  = 101\naccept    = 76.515%\n")
    r = parse_speculative_log(log)
    assert (r["tokens"], r["wall_s"], r["decode_only"]) == (129, 5.861, True)
    assert r["tok_s"] == pytest.approx(129 / 5.861) and r["acceptance"] == pytest.approx(0.76515)
    with pytest.raises(RuntimeError, match="no decode speed"):
        parse_speculative_log("error: failed to load model")


def test_draft_vs_verify_is_draft_time_per_drafted_token_over_verify_time_per_round():
    from types import SimpleNamespace as NS

    from benchmarks.throughput import draft_vs_verify
    rounds = [NS(positions=[1] * 4, times=NS(draft=0.08, verify=0.10)),
              NS(positions=[1] * 2, times=NS(draft=0.04, verify=0.10)),
              NS(positions=[], times=NS(draft=0.0, verify=0.09))]   # drafted nothing: not a drafting round
    assert draft_vs_verify(NS(rounds=rounds)) == pytest.approx((0.12 / 6) / 0.10)
    assert draft_vs_verify(NS(rounds=rounds[2:])) is None


def test_levers_and_throughput_blocks_render_the_new_columns():
    base = {"hardware": {"cpu": "Some CPU", "cpu_flags": ["avx2"], "torch_isa": "AVX2", "cores": 2,
                         "torch_threads": 2}, "commit": "abc1234", "versions": {"torch": "2", "transformers": "5"},
            "date": "2026-12-01", "device": "cpu", "precision": "int8 fbgemm", "precision_reason": "fastest",
            "draft_precision": "int8 onednn", "draft_precision_reason": "its own shapes"}
    result = {**base, "rows": [1, 7], "context": 200, "estimator": ESTIMATOR,
              "forward_ms": {"verifier, lean forward, int4": [96.7, 281.8]},
              "draft_forward_ms": {"draft, lean forward, int4": {"1": 33.0, "7": 110.8}},
              "end_to_end": {"draft int4": {"tok_s": 10.88, "acceptance": 0.8, "tokens_per_round": 4.3,
                                            "draft_vs_verify_median": 0.253, "identical_to_verifier_only": True}},
              "end_to_end_settings": {"prompts": ["a", "b"], "max_new_tokens": 128, "k": 6, "confidence": 0.6},
              "compile": {"eager_ms": 33.6, "compiled_ms": 48.4, "compile_s": 92.4}}
    text = levers.render(result)
    assert "Minimum ms of one forward with a 200-token context" in text
    assert "| verifier, lean forward, int4 | 96.7 | 281.8 |" in text and "| draft, lean forward, int4 | 33.0 | 110.8 |" in text
    assert "| draft int4 | 10.88 | 80% | 4.30 | 0.25 | yes |" in text and "first call 92 s, then 48.4 ms" in text
    spec = {"tok_s": 16.5, "speedup_geomean": 1.2, "acceptance_reported": 0.76, "identical_to_base": None}
    ours = {"tok_s": 12.5, "speedup_geomean": 1.9, "acceptance": 0.84, "tokens_per_round": 4.6, "draft_vs_verify_median": 0.26,
            "identical_to_base": True, "overhead_share": 0.05}
    tp = {**base, "settings": {"k": 6, "confidence": 0.6, "max_new_tokens": 128, "code_prompts": ["a"],
                               "prose_prompts": ["b"], "transformers_prompts": ["a"]},
          "llama_cpp": "measured", "llama_cpp_speculative": "measured", "headline": {"draft / verify (median)": 0.26},
          "summary": {"code": {"speculative (ours)": ours, "llama.cpp speculative, n_max 6": spec}}}
    text = throughput.render(tp)
    assert "Draft precision **int8 onednn** — its own shapes" in text and "its speculation: measured" in text
    assert "| speculative (ours) | 12.50 | 1.90x | 84% | 4.60 | 0.26 | 5% | yes |" in text
    assert "| llama.cpp speculative, n_max 6 | 16.50 | 1.20x | 76% | – | – | – | – |" in text
    assert "| draft / verify (median) | 0.26 |" in text


def _generated(name: str, root=ROOT) -> tuple[str, str]:
    """(page from ``root``, text between its markers) of the one page holding block ``name``'s markers."""
    start, end = report.markers(name)
    pages = [p for p in report.pages(root) if start in p.read_text()]
    assert len(pages) == 1, f"block {name!r} is on {len(pages)} pages"
    return pages[0].relative_to(root).as_posix(), pages[0].read_text().split(start, 1)[1].split(end, 1)[0].strip()


def test_every_generated_block_is_the_report_of_the_committed_json():
    """The README's headline and docs/results.md's tables are generated from benchmarks/results/*.json,
    never edited by hand: a result file added or changed without `python -m benchmarks.report` fails
    here, wherever the block's markers sit."""
    for block in report.BLOCKS:
        page, text = _generated(block.name)
        assert text == report.relink(block.render(), block.written_for, page).strip()


def test_the_headline_has_a_column_per_committed_throughput_run():
    """A column per committed throughput run, linked to its block, its figures those of the JSON, and
    a GPU column that says it is not measured."""
    _, block = _generated("headline")
    files = sorted((ROOT / "benchmarks" / "results").glob("throughput-*.json"))
    runs = [d for d in map(json.loads, (f.read_text() for f in files)) if not d.get("tiny")]
    header = block.splitlines()[0]
    assert header.count("results.md#") == len(runs) >= 1 and "GPU (CUDA, Apple MPS)" in header
    for d in runs:
        assert f"**{d['headline']['speculative vs verifier-only, code (geomean)']:.2f}x**" in block
        assert f"{d['headline']['peak resident memory, default run (GiB)']:.2f} GiB" in block


def test_two_cpus_of_one_name_and_flags_keep_their_own_file_and_column():
    """A Zen 4 and a Zen 5 both read "AMD EPYC" with AVX-512 VNNI: their family and model number
    name their files and their columns apart; the same Xeon with AMX hidden is another machine."""
    flags = ["avx2", "fma", "f16c", "avx512f", "avx512_bf16", "avx512_vnni"]
    zen4 = {"cpu": "AMD EPYC", "cpu_vendor": "AuthenticAMD", "cpu_family": 25, "cpu_model_number": 17,
            "cpu_flags": flags, "torch_isa": "AVX512", "cores": 2, "torch_threads": 2, "accelerator": "cpu"}
    zen5 = {**zen4, "cpu_family": 26, "cpu_model_number": 2}
    assert machine_slug(zen4, "cpu") == "cpu-amd-epyc-f25m17-avx512-vnni"
    assert machine_slug(zen5, "cpu") == "cpu-amd-epyc-f26m2-avx512-vnni"
    assert cpu_label(zen4) == "Zen 4 (AMD EPYC, family 25 model 17, avx512_vnni)"
    xeon = {**zen4, "cpu": "Intel(R) Xeon(R) Processor", "cpu_vendor": "GenuineIntel", "cpu_family": 6,
            "cpu_model_number": 207, "cpu_flags": flags + ["avx_vnni", "amx_bf16", "amx_int8", "amx_tile"]}
    hidden = {**xeon, "cpu_flags": flags + ["avx_vnni"]}
    assert machine_slug(xeon, "cpu") == "cpu-intel-xeon-f6m207-amx-int8"
    assert machine_slug(hidden, "cpu") == "cpu-intel-xeon-f6m207-avx512-vnni"

    run = json.loads((ROOT / "benchmarks" / "results" / "throughput-cpu-amd-epyc-f25m17-avx512-vnni.json").read_text())
    runs = [{**run, "hardware": hw, "cpu_slug": machine_slug(hw, "cpu")} for hw in (zen4, zen5)]
    header = throughput.render_headline(runs).splitlines()[0]
    assert "[Zen 4 (AMD EPYC, family 25 model 17, avx512_vnni), 2 cores](docs/results.md#amd-epyc-family-25-model-17-" in header
    assert "[Zen 5 (AMD EPYC, family 26 model 2, avx512_vnni), 2 cores](docs/results.md#amd-epyc-family-26-model-2-" in header


def test_report_writes_each_block_wherever_its_markers_are(tmp_path, capsys):
    """The loop: every committed result is rendered by the module that wrote it, and each block is
    written between its markers on the page that holds them, its links made relative to that page;
    a block whose markers are on no page fails the run and says so."""
    assert all(report.renderer(d["benchmark"]).COMMAND for _, d in report.results())
    (tmp_path / "docs").mkdir()
    readme, results = tmp_path / "README.md", tmp_path / "docs" / "results.md"
    (bench_start, bench_end), (head_start, head_end) = report.markers("bench"), report.markers("headline")
    readme.write_text("# Project\n\nNo results here.\n")
    results.write_text(f"# Results\n\n{head_start}\nstale\n{head_end}\n\n{bench_start}\nstale\n{bench_end}\n")
    assert report.update(tmp_path)
    text = results.read_text()
    assert readme.read_text() == "# Project\n\nNo results here.\n" and "stale" not in text
    assert f"{bench_start}\n{report.render()}\n{bench_end}" in text
    headline = report.render_headline()  # written for the README: its links go to docs/results.md
    assert "](docs/results.md#" in headline
    assert f"{head_start}\n{headline.replace('](docs/results.md#', '](results.md#')}\n{head_end}" in text
    assert report.relink("![a](../x/y.png) [b](#c) [d](https://e.org/f)", "docs/results.md", "README.md") == (
        "![a](x/y.png) [b](#c) [d](https://e.org/f)")

    results.write_text("# Results\n")
    assert not report.update(tmp_path)
    assert "no page holds the markers" in capsys.readouterr().err


def test_app_overhead_compares_the_same_rounds_and_renders_its_table():
    def trace(ms: list[float]) -> dict:
        rounds = [{"emitted": [i], "times": {"draft": t / 2e3, "verify": t / 2e3, "accept": 0, "rollback": 0,
                                             "other": 0}} for i, t in enumerate(ms)]
        return {"rounds": rounds, "summary": {"new_tokens": len(ms), "tokens_per_s": len(ms) / (sum(ms) / 1e3)}}
    cli = trace([100.0] * 9)
    app = trace([100.0] + [110.0] * 4 + [220.0] * 4)  # the app's rounds double over the run
    r = app_overhead.compare(cli, app, {"shown": "8.00 tok/s decoding = 9 tokens", "click_to_finished_s": 2.0,
                                        "browser_cpu_s": 1.0, "others": "other processes used 12% of this machine's"})
    assert r["same_rounds"] and r["app_round_growth"] == pytest.approx(2.0) and r["cli_round_growth"] == 1.0
    # decode speed over every round on both sides: 9 tokens in 0.9 s against 9 in 1.42 s
    assert r["app_vs_cli"] == pytest.approx(0.9 / 1.42) and r["browser_cpu_share"] == 0.25
    assert r["app_tok_s_shown"] == 8.0 and r["others_share_shown"] == 0.12
    d = {"hardware": {"cpu": "Test CPU", "cpu_flags": ["avx2"], "torch_threads": 2}, "device": "cpu",
         "precision": "int8", "versions": {"torch": "t", "transformers": "x"}, "commit": "abc", "date": "2026-12-01",
         "prompt": "p", "settings": {"k": 6, "confidence": 0.6, "temperature": 0.0}, "repeats": 1,
         "summary": {"128": {k: r[k] for k in ("cli_tok_s", "app_tok_s", "app_vs_cli", "app_round_growth",
                                               "browser_cpu_share")}}}
    text = app_overhead.render(d)
    assert "Test CPU (avx2)" in text and f"| 128 | {r['cli_tok_s']:.2f} | {r['app_tok_s']:.2f} | 0.63x | 2.00 | 25% |" in text


def test_gpu_costs_times_the_gpu_path_fits_it_and_predicts_from_the_cpu_acceptance(tmp_path):
    data = run_script(gpu_costs, tmp_path)
    assert data["random_weights"] and data["modes"] == ["eager"] and data["ratios"]["graphs_speedup"] is None
    for name in ("target eager", "draft eager"):
        ms = {int(k): v for k, v in data["costs"][name]["ms"].items()}
        assert sorted(ms) == list(gpu_costs.ROWS) and all(v > 0 for v in ms.values())
        a, b = gpu_costs.fit(ms)
        assert (a, b) == pytest.approx((data["costs"][name]["a_ms"], data["costs"][name]["b_ms"]))
    assert gpu_costs.fit({1: 3.0, 2: 5.0, 3: 7.0}) == pytest.approx((1.0, 2.0))
    tv = {int(k): v for k, v in data["costs"]["target eager"]["ms"].items()}
    code = data["prediction"]["code"]["fast verification (unpadded)"]
    a = data["cpu_acceptance"]["code"]
    assert code["speedup"] == pytest.approx(gpu_costs.tokens_per_round(a, code["k"]) * tv[1]
                                            / (code["k"] * data["costs"]["draft eager"]["ms"]["1"] + tv[code["k"] + 1]))
    text = gpu_costs.render(data)
    assert f"| verifier | eager | {tv[1]:.2f} |" in text and "predicted speed-up, code" in text
    assert data["estimator"] == ESTIMATOR and f"Minimum of {data['reps']} forwards" in text


def test_first_run_measures_a_fresh_process_and_lists_the_cache(tmp_path):
    """The measuring code on a trivial child process: its own peak memory (wait4), its stderr
    lines stamped in order, and the cache listing; the block renders against the targets."""
    import subprocess
    import sys
    out = tmp_path / "x.json"
    # In a process of its own, as it is run: a child's ru_maxrss starts from its parent's resident
    # size at the fork, and this test process may hold the real pair. The benchmark never loads one.
    subprocess.run([sys.executable, "-m", "benchmarks.first_run", "--tiny", "--out", str(out)], check=True,
                   cwd=ROOT, capture_output=True)
    data = json.loads(out.read_text())
    assert data["tiny"] and data["hardware"]["cpu"] and data["versions"]["torch"] == torch.__version__
    s = data["summary"]
    assert 0 < s["first_run_peak_gib"] < 1  # a bare Python process, not this test process
    assert 0 < s["models_ready_s"] <= data["first_run"]["wall_s"]  # not a clock assert: an event inside the run, before its end
    assert s["cache_gb"] >= 0 and set(data["targets"]) >= {"first_run_peak_gib", "cache_gb", "models_ready_s"}
    text = first_run.render(data)
    assert "GiB" in text and ("met" in text or "missed" in text) and "target <= 4" in text


def test_race_races_every_drafter_twice_on_each_prompt(tmp_path):
    from specdec.teach.race import RACERS
    data = run_script(race, tmp_path)
    rows = data["rows"]
    assert {(r["prompt"], r["race"]) for r in rows} == {(p, a) for p in race.PROMPTS for a in ("first", "second")}
    assert [r["drafter"] for r in rows if r["prompt"] == "code" and r["race"] == "first"] == list(RACERS)
    assert all(r["identical"] for r in rows)  # T = 0: every drafter gives the verifier-only output

