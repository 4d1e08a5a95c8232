"""Edges found by review (issue 7), each with a test that failed before its fix, and the round
structure checked on purpose. Tiny random models only."""
from __future__ import annotations

import ast
import itertools
import json
import re
import sys
from importlib import metadata
from pathlib import Path

import pytest
import torch
from helpers import tiny

from specdec import (
    ConfigError,
    DecodeConfig,
    Generation,
    ModelLoadError,
    NumericalError,
    SamplingConfig,
    TraceFile,
    make_drafter,
)
from specdec.cli import main as cli
from specdec.decode.record import TOP_N
from specdec.decode.sampling import probs_from_logits
from specdec.trace import (
    ACCEPTED,
    AFTER_STOP,
    BONUS,
    PLAIN,
    REJECTED,
    RESAMPLED,
    UNREACHED,
)
from specdec.weights.pairing import ModelPair

ROOT = Path(__file__).resolve().parents[2]


def _run(pair, prompt=None, **cfg):
    cfg = DecodeConfig(**{"confidence": 0.0, **cfg})
    drafter = "model" if pair.draft is not None else "lookup"
    return Generation(pair, prompt or tiny.prompt_ids(), cfg, make_drafter(drafter, pair)).run()


# ---- 1. a stop token inside an accepted block ------------------------------------------------

def test_stop_token_inside_the_accepted_block_ends_the_round_record_there():
    target = tiny.model(3, scale=8)
    pair = tiny.pair(target, target)  # draft = verifier: at T = 0 every draft is kept
    pair.stop_ids = frozenset()
    free = _run(pair, max_new_tokens=12, k=4)
    assert free.token_ids[0] != free.token_ids[1]
    pair.stop_ids = frozenset({free.token_ids[1]})  # the 2nd generated token is a stop token
    cfg = DecodeConfig(max_new_tokens=12, k=4, confidence=0.0)
    # the model drafter stops after drafting a stop token; one that does not know the stop
    # tokens drafts on, and the engine marks what follows the kept stop token
    for stop_ids, statuses, why in ((None, [ACCEPTED, ACCEPTED], "stop_token"),
                                    (frozenset(), [ACCEPTED, ACCEPTED, AFTER_STOP, AFTER_STOP], "k")):
        gen = Generation(pair, tiny.prompt_ids(), cfg, make_drafter("model", pair, stop_ids=stop_ids)).run()
        assert gen.token_ids == free.token_ids[:2] and gen.stop_reason == "eos"
        r = gen.rounds[0]
        assert len(gen.rounds) == 1 and r.emitted == tuple(free.token_ids[:2])
        assert r.n_accepted == 2 and r.next_kind is None and r.next_token is None and r.rejected_at is None
        assert [p.status for p in r.positions] == statuses and r.draft_stop == why
        assert all(p.ratio is None and p.u is None for p in r.positions[2:])  # untested: no verdict numbers
        s = gen.summary()
        assert (s.accepted, s.drafted, s.acceptance_rate, s.new_tokens) == (2, 2, 1.0, 2)
        assert s.accepted_histogram[2] == 1 and sum(s.accepted_histogram) == 1


# ---- round structure, on purpose ---------------------------------------------------------------

CASES = [(temperature, top_k, drafter, seed) for temperature, top_k in ((0.0, 0), (1.0, 5), (0.8, 3))
         for drafter in ("model", "lookup", "none") for seed in range(3)]


@pytest.mark.parametrize("temperature,top_k,drafter,seed", CASES)
def test_every_round_has_the_structure_of_the_rule(temperature, top_k, drafter, seed):
    target = tiny.model(1, scale=3)
    pair = tiny.pair(target, tiny.noisy_copy(target, 2, 0.6))
    prompt = tiny.prompt_ids(8, seed) * 2  # repetition: prompt lookup finds something to copy
    cfg = DecodeConfig(max_new_tokens=30, k=3, confidence=0.0, seed=seed, sampling=SamplingConfig(temperature, top_k))
    gen = Generation(pair, prompt, cfg, make_drafter(drafter, pair)).run()
    assert sum(len(r.emitted) for r in gen.rounds) == len(gen.token_ids)
    for r in gen.rounds:
        k, n = len(r.positions), r.n_accepted
        assert [p.status for p in r.positions[:n]] == [ACCEPTED] * n
        assert list(r.emitted[:n]) == [p.token_id for p in r.positions[:n]]
        if r.next_kind is None:  # only a stop token among the kept drafts ends a round without a next token
            assert r is gen.rounds[-1] and gen.stop_reason == "eos" and r.emitted[-1] in pair.stop_ids
            assert len(r.emitted) == n and all(p.status == AFTER_STOP for p in r.positions[n:])
            continue
        assert len(r.emitted) == n + 1 and r.emitted[-1] == r.next_token.token_id
        assert (r.next_kind == PLAIN) == (k == 0)
        assert (r.next_kind == BONUS) == (0 < k == n)                     # bonus iff every draft was kept
        assert (r.next_kind == RESAMPLED) == (r.rejected_at == n)
        if r.rejected_at is not None:
            assert r.positions[n].status == REJECTED and all(p.status == UNREACHED for p in r.positions[n + 1:])
            x = r.positions[n]                                            # rejected means u > p/q; at T = 0,
            assert x.u > x.ratio if temperature else x.u is None and x.ratio < 1  # no draw and not the argmax
        assert all(p.u <= p.ratio if temperature else p.u is None and p.ratio == 1
                   for p in r.positions[:n])                              # kept means u <= p/q (T = 0: p/q = 1)
        if top_k and top_k <= TOP_N:  # the whole next distribution is in the trace: it must sum to 1
            assert sum(t.prob for t in r.next_top) == pytest.approx(1, abs=1e-5)
        if r.next_kind == RESAMPLED and top_k and top_k <= TOP_N:
            pos = r.positions[n]  # the exact residual norm(max(0, p - q)) from the recorded p and q
            p = {c.token_id: c.p for c in pos.candidates}
            q = {c.token_id: c.q for c in pos.candidates}
            residual = {t: max(0.0, p.get(t, 0) - q.get(t, 0)) for t in p.keys() | q.keys()}
            mass = sum(residual.values())
            expected = {t: m / mass for t, m in residual.items() if m > 0}
            got = {t.token_id: t.prob for t in r.next_top}
            assert got.keys() == expected.keys()
            assert all(got[t] == pytest.approx(expected[t], abs=1e-4) for t in got)


def test_p_and_q_are_both_warped_in_the_engine():
    """With top-k 3 the verifier's p and the draft's q each put mass on at most 3 tokens, and the
    drafted token's q(x) is the warped draft distribution the drafter sampled from."""
    target = tiny.model(1, scale=2)
    draft = tiny.noisy_copy(target, 2, 0.8)
    pair = tiny.pair(target, draft)
    sampling = SamplingConfig(1.3, top_k=3)
    prompt = tiny.prompt_ids(6)
    gen = Generation(pair, prompt, DecodeConfig(max_new_tokens=6, k=3, confidence=0.0, sampling=sampling),
                     make_drafter("model", pair)).run()
    r = gen.rounds[0]
    for pos in r.positions:
        assert sum(c.p > 0 for c in pos.candidates) <= 3 and sum(c.q > 0 for c in pos.candidates) <= 3
        assert sum(c.p for c in pos.candidates) == pytest.approx(1, abs=1e-5)
        assert sum(c.q for c in pos.candidates) == pytest.approx(1, abs=1e-5)
        assert pos.token_id in {c.token_id for c in pos.candidates}
    with torch.inference_mode():
        raw = draft(torch.tensor([prompt])).logits[0, -1:, :pair.vocab_size]
    assert r.positions[0].q == pytest.approx(float(probs_from_logits(raw, sampling)[0, r.positions[0].token_id]),
                                             abs=1e-5)


def _exact_joint(model, prompt, sampling, vocab):
    with torch.inference_mode():
        first = probs_from_logits(model(torch.tensor([prompt])).logits[0, -1:, :vocab], sampling)[0]  # (V,)
        seconds = probs_from_logits(model(torch.tensor([prompt + [t] for t in range(vocab)])).logits[:, -1, :vocab],
                                    sampling)                                                    # (V, V)
    return first[:, None] * seconds


@pytest.mark.parametrize("drafter", ["none", "model"])
def test_fresh_draws_across_rounds_give_the_exact_two_token_joint_distribution(drafter):
    """Re-seeding (or re-using) the generator each round would correlate round 2's draws with
    round 1's; the joint of the first two tokens would no longer be p(t1) p(t2 | t1). The 4000 runs
    decode on the lean forward (float32: transformers' logits to ~1e-6, at half its overhead)."""
    target = tiny.model(5, scale=1.5)
    pair = tiny.pair(tiny.lean(target), tiny.lean(tiny.noisy_copy(target, 3, 0.7), batch_invariant=False))
    pair.stop_ids = frozenset()
    sampling = SamplingConfig(1.0, top_k=3)
    prompt, runs = tiny.prompt_ids(5), 4000
    exact = _exact_joint(target, prompt, sampling, tiny.V).flatten()
    counts = torch.zeros(tiny.V * tiny.V)
    for seed in range(runs):
        cfg = DecodeConfig(max_new_tokens=2, k=1, confidence=0.0, seed=seed, sampling=sampling)
        ids = Generation(pair, prompt, cfg, make_drafter(drafter, pair)).run().token_ids
        counts[ids[0] * tiny.V + ids[1]] += 1
    support = exact > 0
    assert counts[~support].sum() == 0
    # chi-square over the (at most 9) cells with mass: 99.9th percentile of chi2(8) is 26.1
    expected = exact[support] * runs
    chi2 = float(((counts[support] - expected) ** 2 / expected).sum())
    assert chi2 < 26.1, chi2


# ---- 2. per-phase timing waits for the device ---------------------------------------------------

def test_every_phase_and_every_draft_forward_is_timed_after_a_device_sync(monkeypatch):
    import specdec.model.devices
    calls = []
    monkeypatch.setattr(specdec.model.devices, "synchronize", lambda device: calls.append(device))
    target = tiny.model(1)
    pair = tiny.pair(target, tiny.noisy_copy(target, 2, 0.3))
    gen = _run(pair, max_new_tokens=10, k=3)
    draft_forwards = sum(len(r.positions) for r in gen.rounds)
    # prefill: 2 readings; each round: 7 readings, plus 2 around every draft forward
    assert len(calls) == 2 + 7 * len(gen.rounds) + 2 * draft_forwards
    assert set(calls) == {pair.device}


# ---- 3. temperature validation --------------------------------------------------------------

def test_an_integer_temperature_runs_and_a_tiny_one_is_refused():
    assert SamplingConfig(2).temperature == 2.0 and isinstance(SamplingConfig(2).temperature, float)
    pair = tiny.pair(tiny.model(1), tiny.model(2))
    gen = _run(pair, max_new_tokens=6, k=2, sampling=SamplingConfig(1, top_k=5, top_p=1))
    assert len(gen.token_ids) >= 1
    for bad in (1e-45, 1e-3, -1, float("nan"), True, "0.5"):
        with pytest.raises(ConfigError) as e:
            SamplingConfig(bad)
        assert e.value.field == "temperature"


def test_non_finite_probabilities_fail_cleanly():
    with pytest.raises(NumericalError, match="NaN"):
        probs_from_logits(torch.tensor([[0.0, float("nan")]]), SamplingConfig(1.0))
    huge = torch.tensor([[3e38, -3e38, 0.0]])
    with pytest.raises(NumericalError, match="not finite"):
        probs_from_logits(huge, SamplingConfig(0.01))


@pytest.mark.parametrize("row, col", [(0, 0), (3, 517), (6, 999)])
def test_the_numerics_flags_catch_one_bad_entry_anywhere(row, col):
    """``numerics`` reads its two flags off one sum each: one NaN logit or one non-finite probability
    anywhere still sets its flag; a masked (-inf) logit alone is no NaN."""
    from specdec.decode.sampling import numerics
    logits = torch.randn(7, 1000)
    probs = logits.softmax(-1)
    assert numerics(logits, probs).tolist() == [0.0, 0.0] and numerics(logits).tolist() == [0.0, 0.0]
    masked = logits.clone()
    masked[row, col] = float("-inf")
    assert numerics(masked, masked.softmax(-1)).tolist() == [0.0, 0.0]
    for bad in (float("nan"), float("inf")):
        broken = probs.clone()
        broken[row, col] = bad
        assert numerics(logits, broken).tolist() == [0.0, 1.0]
    logits[row, col] = float("nan")
    assert numerics(logits, probs).tolist() == [1.0, 0.0]


# ---- 5. padding rows of the output layer are never sampled ------------------------------------

def test_ids_beyond_the_tokenizer_are_never_sampled():
    def loud_padding(seed):
        m = tiny.model(seed)
        with torch.no_grad():  # padding rows with large logits: unmasked, they would be drawn often
            m.lm_head.weight[tiny.V:] = 5 * torch.randn(m.lm_head.weight[tiny.V:].shape)
        return m
    pair = tiny.pair(loud_padding(1), loud_padding(2))
    assert pair.vocab_size == tiny.V
    for seed in range(5):
        gen = _run(pair, max_new_tokens=12, k=3, seed=seed, sampling=SamplingConfig(1.0))
        assert max(gen.token_ids) < tiny.V
        assert all(t.token_id < tiny.V for r in gen.rounds for p in r.positions for t in p.candidates)


# ---- 6. a cache that cannot be rolled back is refused at load ----------------------------------

def _sliding(seed):
    m = tiny.model(seed)
    m.config.use_sliding_window, m.config.sliding_window, m.config.max_window_layers = True, 8, 0
    m.config.layer_types = ["sliding_attention"] * m.config.num_hidden_layers
    return m


def _cli_with(monkeypatch, make_pair):
    """The CLI, with load_pair building this pair of tiny models instead of loading the real one."""
    import specdec.weights.loading
    monkeypatch.setattr(specdec.weights.loading, "load_pair", lambda *a, **kw: make_pair())
    return cli


def test_a_model_whose_cache_cannot_be_cropped_is_refused_at_load(monkeypatch, capsys):
    with pytest.raises(ModelLoadError, match="draft: 'tiny-draft' cannot take part.*sliding-window"):
        ModelPair(tiny.model(1), tiny.tokenizer(), _sliding(2), "tiny-target", "tiny-draft")
    main = _cli_with(monkeypatch, lambda: tiny.pair(tiny.model(1), _sliding(2)))
    code = main(["generate", "--prompt", "w1 w2"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and "Traceback" not in "\n".join(err)
    assert err[-1].startswith("error: draft: 'tiny-draft' cannot take part in speculative decoding")


# ---- 7. one settings record, written by every entry point ------------------------------------

def test_cli_and_app_traces_carry_the_same_settings_record(tmp_path, monkeypatch, capsys):
    from specdec import ModelChoice
    from specdec_ui.state import Loader, Session, form_defaults
    from specdec_ui.tabs import run as run_tab
    pair = tiny.pair(tiny.model(1), tiny.model(2))
    main = _cli_with(monkeypatch, lambda: pair)
    assert main(["generate", "--prompt", "w1 w2 w3", "--max-new-tokens", "6", "--json"]) == 0
    cli_trace = json.loads(capsys.readouterr().out)
    s = cli_trace["settings"]
    assert s["prompt"] == "w1 w2 w3" and (s["target"], s["draft"]) == ("tiny-target", "tiny-draft")
    assert (s["device"], s["precision"]) == ("cpu", "float32")  # what ran, not "auto"
    final = list(run_tab.run(Loader(ModelChoice.of(pair), pair), Session(),
                              {**form_defaults(), "prompt": "w1 w2 w3", "max_new_tokens": 6}))[-1]
    app_trace = json.loads(Path(final.download).read_text())
    assert app_trace["settings"].keys() == s.keys()
    assert {k: app_trace["settings"][k] for k in ("prompt", "target", "draft", "device", "precision")} == \
           {k: s[k] for k in ("prompt", "target", "draft", "device", "precision")}
    path = tmp_path / "cli-trace.json"
    path.write_text(json.dumps(cli_trace))
    replayed = run_tab.replay(Session(), str(path))
    assert "prompt: 'w1 w2 w3'" in replayed.view.status and "precision float32" in replayed.view.status
    assert TraceFile.from_json(path.read_text()).settings == s


# ---- 8. one browser lookup -----------------------------------------------------------------

def test_one_browser_lookup(tmp_path, monkeypatch):
    from benchmarks import chromium as browser
    fake = tmp_path / "my-chrome"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("CHROMIUM", str(fake))
    assert browser.find_chromium() == str(fake)
    assert "/Applications/Google Chrome.app/Contents/MacOS/Google Chrome" in browser.CANDIDATES  # macOS
    others = [p for p in itertools.chain(ROOT.glob("tests/**/*.py"), ROOT.glob("scripts/*"), ROOT.glob("specdec_ui/**/*.py"),
                                         [ROOT / "Makefile"])
              if p.name not in ("chromium.py", "test_edges.py") and "/usr/bin/chromium" in p.read_text()]
    assert others == [], f"browser paths outside benchmarks/chromium.py: {others}"


# ---- 9. every third-party import is declared -------------------------------------------------

def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_every_third_party_import_of_the_app_and_engine_is_in_requirements():
    local = {"specdec", "specdec_ui", "benchmarks", "app"}
    files = [*ROOT.glob("specdec/**/*.py"), *ROOT.glob("specdec_ui/**/*.py"), ROOT / "app.py"]
    imported = set().union(*map(_imports, files)) - set(sys.stdlib_module_names) - local
    imported.discard("playwright")  # only benchmarks.chromium's launch(), used by the tests and the screenshot
    reqs = {re.split(r"[=<>\[ ;#]", line.strip())[0].lower().replace("_", "-")
            for line in (ROOT / "requirements.txt").read_text().splitlines() if line.strip() and line[0] != "#"}
    dists = metadata.packages_distributions()
    missing = {m for m in imported if not {d.lower().replace("_", "-") for d in dists.get(m, [m])} & reqs}
    assert not missing, f"imported but not in requirements.txt: {sorted(missing)}"
