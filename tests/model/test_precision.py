"""The per-machine choice of representation, with capabilities and timings faked; and of specdec's
kernels' prefetch setting, applied to the library when a pair loads."""
import json

import pytest
import torch

from specdec.model import calibration, native
from specdec.model import precision as P
from specdec.options import ConfigError, DecodeConfig


def table(timings: dict) -> dict:
    """A calibration record as :func:`specdec.model.calibration.measure` writes it, for given medians."""
    return {"timings_ms": timings, "spread_ms": {n: [[t, t] for t in ts] for n, ts in timings.items()}, "skipped": {}}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    return tmp_path


@pytest.mark.parametrize("caps, expected, int8_kernels, int4_kernels", [
    ({"native_bf16": False, "fbgemm": True, "onednn_int8": False, "specdec": True, "isa": "AVX2"},
     ["float32", "float16", "int8", "int4"], ["specdec"], ["specdec", "torch"]),            # AMD EPYC Zen 3: no VNNI
    ({"native_bf16": True, "fbgemm": True, "onednn_int8": True, "specdec": True, "isa": "AVX512"},
     ["float32", "bfloat16", "float16", "int8", "int4"], ["specdec", "onednn"],
     ["specdec", "torch"]),                                                                 # Xeon AMX, Zen 4
    ({"native_bf16": False, "fbgemm": True, "onednn_int8": False, "specdec": False, "isa": "AVX2"},
     ["float32", "float16", "int8", "int4"], ["fbgemm"], ["torch"]),                       # kernels not built
    ({"native_bf16": False, "fbgemm": False, "onednn_int8": True, "specdec": False, "isa": "AVX512"},
     ["float32", "int8", "int4"], ["onednn"], ["torch"]),                                  # a torch without fbgemm
    ({"native_bf16": False, "fbgemm": False, "onednn_int8": False, "specdec": False, "isa": "DEFAULT"},
     ["float32"], [], []),                                                                 # e.g. ARM
])
def test_candidates_follow_capabilities(caps, expected, int8_kernels, int4_kernels):
    assert P.cpu_candidates(caps) == expected  # emulated bf16 is never a candidate
    assert [v.kernel for v in P.cpu_variants(caps) if v.name == "int8"] == int8_kernels
    assert [v.kernel for v in P.cpu_variants(caps) if v.name == "int4"] == int4_kernels
    assert {v.label for v in P.cpu_variants(caps) if v.name == "float32"} == {"float32", "float32 transposed"}


def test_onednn_int8_needs_vnni_or_amx(monkeypatch):
    """Without VNNI the u8*s8 pairwise sums are 16-bit and can saturate: no oneDNN int8 there."""
    from specdec.model.kernels import has_vnni
    assert not has_vnni(["avx2", "fma", "avx512f"])
    assert has_vnni(["avx2", "avx512_vnni"]) and has_vnni(["avx_vnni"]) and has_vnni(["amx_int8"])
    monkeypatch.setattr(P, "cpu_description", lambda: {"model": "Zen 3", "flags": ["avx2", "fma"], "isa": "AVX2"})
    assert P.cpu_capabilities()["onednn_int8"] is False


def test_this_machine_has_float32_at_least():
    assert P.cpu_candidates()[0] == "float32"
    assert set(P.cpu_capabilities()) == {"native_bf16", "fbgemm", "onednn_int8", "specdec", "isa"}


@pytest.mark.parametrize("label", ["float32", "float32 transposed", "int8 specdec", "int8 onednn", "int8 fbgemm",
                                   "int4 specdec", "int4 torch"])
def test_labels_round_trip(label):
    assert P.Precision.from_label(label).label == label


@pytest.mark.parametrize("timings, expected", [
    # an AVX2 machine without native bf16: int8 (fbgemm, the only int8 there) wins by far
    ({"float32": [4.3, 11.2], "float32 transposed": [4.3, 4.2], "int8 fbgemm": [0.41, 0.76], "int4 torch": [1.0, 2.8]},
     ("int8", False, "fbgemm")),
    # an AMX machine: bf16 is flat in the rows and beats int8 at 5 rows
    ({"float32": [1.3, 2.4], "float32 transposed": [1.2, 2.9], "bfloat16": [1.08, 1.31], "int8 fbgemm": [0.9, 1.6],
      "int8 onednn": [0.95, 1.5]}, ("bfloat16", False, "")),
    # a VNNI machine where oneDNN's int8 beats fbgemm's at 1 + K+1 rows
    ({"float32": [1.3, 2.4], "int8 fbgemm": [0.49, 0.60], "int8 onednn": [0.45, 0.5]}, ("int8", False, "onednn")),
    # float32 only, where the transposed orientation is faster
    ({"float32": [4.3, 11.2], "float32 transposed": [4.3, 4.2]}, ("float32", True, "")),
])
def test_pick_is_the_lowest_cost_at_1_and_k_plus_1_rows(timings, expected):
    p = P.pick(timings, 4, "Some CPU")
    assert (p.name, p.transposed, p.kernel) == expected
    assert p.reason.startswith(p.label + ":") and "fastest here" in p.reason and "Some CPU" in p.reason


def test_a_requested_name_takes_its_fastest_variant_here():
    timings = {"float32": [1.3, 2.4], "int8 fbgemm": [0.49, 0.60], "int8 onednn": [0.55, 0.9], "int4 torch": [0.3, 0.4]}
    assert P.pick(timings, 4, "Some CPU", ["int8"]).label == "int8 fbgemm"
    assert P.pick(timings, 4, "Some CPU").label == "int4 torch"


def test_noise_cannot_flip_the_choice_away_from_specdecs_kernels():
    """A variant must beat specdec's by more than MARGIN to be chosen over it; beyond, it is."""
    close = {"int8 specdec": [0.50, 0.60], "int8 fbgemm": [0.49, 0.58], "float32": [4.0, 5.0]}
    chosen = P.pick(close, 4, "Some CPU")
    assert chosen.label == "int8 specdec" and "within 5% of the fastest (int8 fbgemm)" in chosen.reason
    clear = {"int8 specdec": [0.60, 0.70], "int8 fbgemm": [0.49, 0.58]}
    chosen = P.pick(clear, 4, "Some CPU")
    assert chosen.label == "int8 fbgemm" and "deprecated quantized engine" in chosen.reason


DRAFT_SHAPES = {"layer": [[1152, 896], [896, 896], [9728, 896], [896, 4864]], "layers": 24, "head": [151936, 896]}


@pytest.mark.parametrize("timings, expected", [
    # per layer [one layer's matmuls, output layer] at 1 row: the output layer can decide it
    ({"int8 onednn": [0.30, 14.4], "int8 fbgemm": [0.32, 6.3], "bfloat16": [0.50, 9.0]}, "int8 fbgemm"),
    ({"int8 onednn": [0.20, 8.0], "int8 fbgemm": [0.32, 6.3], "int4 torch": [0.45, 3.0]}, "int8 onednn"),  # 12.8, 14.0, 13.8
    # 4-bit drafts are candidates like any other
    ({"float32": [2.0, 30.0], "int4 specdec": [0.40, 3.0]}, "int4 specdec"),
])
def test_the_draft_picks_its_lowest_time_per_drafted_token(timings, expected):
    p = P.pick_draft(timings, 24, "Some CPU")
    assert p.label == expected
    assert p.reason.startswith(expected + ":") and "one drafted token" in p.reason and "Some CPU" in p.reason
    assert P.pick_draft({"float32": [2.0, 30.0], "int4 torch": [0.40, 3.0]}, 24, "Some CPU", ["float32"]).label == "float32"


def test_draft_shapes_follow_its_config():
    from types import SimpleNamespace
    config = SimpleNamespace(hidden_size=896, num_attention_heads=14, num_key_value_heads=2, intermediate_size=4864,
                             num_hidden_layers=24, vocab_size=151936)
    shapes = P.draft_shapes(config)
    assert shapes["layer"] == [(1152, 896), (896, 896), (9728, 896), (896, 4864)]
    assert (shapes["layers"], shapes["head"]) == (24, (151936, 896))


def test_the_drafts_output_layer_is_timed_on_a_slice_and_scaled_to_all_its_rows(monkeypatch):
    """The whole output layer in every variant at once was most of a first run's peak memory: it is
    timed on HEAD_ROWS rows, and its time scaled by vocab / HEAD_ROWS (one row reads every weight once)."""
    timed = []

    def fake_measure(layers, rows, reps=calibration.REPS):
        shape = {(layer.out_features, layer.in_features) for layer in layers.values()}
        timed.append(shape.pop())
        return table({label: [float(layer.out_features)] for label, layer in layers.items()})

    monkeypatch.setattr(calibration, "measure", fake_measure)
    monkeypatch.setattr(calibration, "HEAD_ROWS", 256)
    shapes = {"layer": [(96, 64), (64, 64)], "layers": 2, "head": (1000, 64)}
    out = calibration.calibrate_draft([P.Precision("float32", "test")], shapes)
    assert timed == [(96, 64), (64, 64), (256, 64)]
    assert out["timings_ms"]["float32"] == [96 + 64, pytest.approx(1000.0)]  # 256 ms on 256 rows, x 1000/256
    assert out["head_rows_timed"] == 256
    shapes["head"] = (100, 64)  # a head smaller than the slice is timed whole
    assert calibration.calibrate_draft([P.Precision("float32", "test")], shapes)["timings_ms"]["float32"][1] == 100


def test_the_draft_is_calibrated_apart_from_the_verifier_and_cached(cache, monkeypatch):
    from types import SimpleNamespace
    calls = []
    monkeypatch.setattr(calibration, "calibrate", lambda variants, k: calls.append("verifier") or table(
        {"int8 onednn": [1.0, 1.2], "int8 fbgemm": [0.9, 1.5]}))
    monkeypatch.setattr(calibration, "calibrate_draft", lambda variants, shapes: calls.append("draft") or table(
        {"int8 onednn": [0.3, 14.0], "int8 fbgemm": [0.3, 6.0]}))
    config = SimpleNamespace(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, intermediate_size=128,
                             num_hidden_layers=2, vocab_size=1000)
    cpu = torch.device("cpu")
    assert P.choose(cpu, "auto").label == "int8 onednn"          # 2.2 < 2.4 at 1 + K+1 rows
    assert P.choose_draft(cpu, "auto", config).label == "int8 fbgemm"  # its output layer decides
    assert P.choose_draft(cpu, "auto", config).label == "int8 fbgemm"
    assert calls == ["verifier", "draft"]                         # each measured once, then read from the cache
    assert len(list((cache / "calibration").glob("*.json"))) == 2
    assert P.choose_draft(cpu, "int8", config).reason == "int8 fbgemm: requested"
    with pytest.raises(ConfigError, match="draft_precision must be one of"):
        P.choose_draft(cpu, "int3", config)
    assert P.choose_draft(torch.device("mps"), "auto", config).name == "float16"


def test_auto_measures_once_and_caches_per_machine(cache, monkeypatch):
    calls = []

    def fake(variants, k):
        calls.append(k)
        return table({"float32": [5.0, 5.0], "int8 fbgemm": [1.0, 2.0]})

    monkeypatch.setattr(calibration, "calibrate", fake)
    cpu = torch.device("cpu")
    assert P.choose(cpu, "auto").name == "int8"
    assert P.choose(cpu, "auto").name == "int8"
    assert calls == [P.CALIBRATION_K] == [DecodeConfig.k]  # at the default K's rows; the second read the cache
    (path,) = (cache / "calibration").glob("*.json")
    saved = json.loads(path.read_text())
    assert saved["cpu"] == P.cpu_description() and saved["timings_ms"]["int8 fbgemm"] == [1.0, 2.0]
    assert saved["spread_ms"]["int8 fbgemm"] == [[1.0, 1.0], [2.0, 2.0]]   # what the choice rested on
    assert "at 1 + 7 rows" in P.choose(cpu, "auto").reason and calls == [6]  # one choice whatever K a run asks for


def test_gpus_take_their_native_half_precision_and_say_why(monkeypatch):
    cuda = torch.device("cuda")
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: "NVIDIA H200")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d=None: (9, 0))
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    chosen = P.choose(cuda, "auto")
    assert chosen.name == "bfloat16" and "native bf16 on NVIDIA H200 (compute capability 9.0)" in chosen.reason
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d=None: (7, 5))
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    assert P.choose(cuda, "auto").name == "float16" and "no native bf16" in P.choose(cuda, "auto").reason
    assert P.choose(torch.device("mps"), "auto").name == "float16"
    assert P.choose(cuda, "float32").reason == "float32: requested on cuda"
    monkeypatch.setattr(P, "weight_only_int8_on", lambda device: False)
    with pytest.raises(ConfigError, match="precision 'int8' has no kernel on cuda in this torch build"):
        P.choose(cuda, "int8")
    monkeypatch.setattr(P, "weight_only_int8_on", lambda device: True)
    assert P.choose(cuda, "int8").name == "int8"
    with pytest.raises(ConfigError, match="draft_precision 'int4' has no kernel on mps"):
        P.choose_draft(torch.device("mps"), "int4", None)


def test_bad_or_unavailable_precision_is_a_clear_error(monkeypatch):
    with pytest.raises(ConfigError, match="precision must be one of auto, float32, bfloat16, float16, int8, int4"):
        P.choose(torch.device("cpu"), "int3")
    monkeypatch.setattr(P, "cpu_candidates", lambda: ["float32"])
    with pytest.raises(ConfigError, match="precision 'int8' has no native kernel on this CPU"):
        P.choose(torch.device("cpu"), "int8")


def test_timing_is_interleaved_robust_and_skips_a_reference_path(monkeypatch):
    """Medians of interleaved calls, the spread kept, and a variant 10x slower than the fastest
    dropped after the warm-up reps instead of being timed REPS times."""
    from specdec.model.kernels import PackedLinear
    calls = []

    class Fake(PackedLinear):
        def __init__(self, name, ms):
            super().__init__(8, 8, None)
            self.name, self.ms = name, ms

        def nbytes(self):
            return 1 << 30                              # big: a ring of 2 copies

        def clone(self):
            return Fake(self.name, self.ms)

        def _matmul(self, x):
            calls.append(self.name)
            clock[0] += self.ms / 1e3 * (3 if len(calls) == 7 else 1)  # one slow outlier for "a"
            return x

    clock = [0.0]
    monkeypatch.setattr(calibration.time, "perf_counter", lambda: clock[0])
    out = calibration.measure({"a": Fake("a", 1.0), "b": Fake("b", 2.0), "slow": Fake("slow", 50.0)}, [1], reps=9)
    assert calls[:3] == ["a", "b", "slow"]              # interleaved from the first sweep
    assert out["timings_ms"]["a"] == pytest.approx([1.0]) and out["timings_ms"]["b"] == pytest.approx([2.0])
    assert out["spread_ms"]["a"][0] == pytest.approx([1.0, 3.0])    # the outlier is in the spread, not the median
    assert "slow" in out["skipped"] and calls.count("slow") == 1 + calibration.WARM_REPS
    assert calls.count("a") == 10


PREFETCH_TABLES = {  # ms at 1 and K+1 rows per setting, as calibrate_prefetch measures them
    "clear": {"off": [1.20, 2.40], "2048 B NTA": [0.80, 1.50], "4096 B T0": [1.00, 2.00], "8192 B T0": [0.95, 1.90]},
    "close": {"off": [1.20, 2.40], "2048 B NTA": [0.98, 1.95], "4096 B T0": [1.00, 2.00]},
    "off": {"off": [0.70, 1.40], "1024 B T0": [1.00, 2.00], "4096 B T0": [1.00, 2.00]},
}


@pytest.mark.parametrize("case, expected, how", [
    ("clear", native.Prefetch(2048, native.Hint.NTA), "fastest here"),
    ("close", native.DEFAULT_PREFETCH, "within 5% of the fastest (2048 B NTA) and preferred"),  # 2.93 against 3.0
    ("off", native.Prefetch(0), "fastest here"),
])
def test_the_prefetch_is_the_fastest_at_1_and_k_plus_1_rows_the_default_within_the_margin(case, expected, how):
    setting, why = P.pick_prefetch(PREFETCH_TABLES[case], 6)
    assert setting == expected and why.startswith(f"prefetch {expected.label}: {how} at 1 + 7 rows (ms: ")


@pytest.fixture
def prefetch_timed(cache, monkeypatch):
    """The verifier's table and the prefetch table faked; the variants each prefetch table was timed on."""
    timed = []
    monkeypatch.setattr(calibration, "calibrate", lambda variants, k: table(
        {"float32": [5.0, 5.0], "int8 specdec": [1.0, 2.0], "int4 specdec": [0.9, 1.9], "int8 onednn": [0.5, 1.0]}))
    monkeypatch.setattr(calibration, "calibrate_prefetch",
                        lambda variant, k: timed.append(variant.label) or table(PREFETCH_TABLES["clear"]))
    return timed


def test_the_prefetch_is_timed_on_the_verifiers_kernel_where_it_is_specdecs_and_cached(prefetch_timed):
    cpu = torch.device("cpu")
    assert P.choose(cpu, "auto").prefetch is None                  # oneDNN's int8: nothing of specdec's to tune
    chosen = P.choose(cpu, "int4")
    assert chosen.prefetch == native.Prefetch(2048, native.Hint.NTA)
    assert chosen.reason == "int4 specdec: requested; prefetch 2048 B NTA: fastest here at 1 + 7 rows (ms: " \
                            "2048 B NTA 2.30, 8192 B T0 2.85, 4096 B T0 3.00, off 3.60)"
    assert P.choose(cpu, "int4").prefetch == chosen.prefetch
    assert prefetch_timed == ["int4 specdec"]                      # timed once, then read from the cache
    assert P.choose(cpu, "int8").prefetch is None and P.choose(cpu, "float32").prefetch is None


def test_without_the_library_no_prefetch_is_timed(prefetch_timed):
    with native.disabled():
        assert P.with_prefetch(P.Precision("int8", "")).prefetch is None        # fbgemm's int8 here
    assert prefetch_timed == []


def test_prefetch_settings_are_timed_interleaved_on_one_layer_and_the_setting_restored(monkeypatch):
    """Each setting is set (untimed) before its turn, on one layer and its copies (not a ring per
    setting), and the library's setting is as it was after."""
    from specdec.model.kernels import PackedLinear
    setting = [native.Prefetch(512, native.Hint.T1)]
    copies, calls = [], []

    class Fake(PackedLinear):
        @classmethod
        def from_weight(cls, weight, bias):
            return cls(8, 8, None)

        def nbytes(self):
            return 1 << 30                                       # a ring of 2 copies

        def clone(self):
            copies.append(1)
            return Fake(8, 8, None)

        def _matmul(self, x):
            calls.append(setting[0].label)
            clock[0] += (1.0 + setting[0].distance / 8192) / 1e3  # ms grow with the distance
            return x

    class Variant:
        label = "int8 specdec"

        def layers(self, device):
            return P.Layers(Fake, device, {}, {})

    monkeypatch.setattr(native, "set_prefetch", lambda p: setting.__setitem__(0, p))
    monkeypatch.setattr(native, "prefetch", lambda: setting[0])
    clock = [0.0]
    monkeypatch.setattr(calibration.time, "perf_counter", lambda: clock[0])
    out = calibration.calibrate_prefetch(Variant(), 6)
    labels = [p.label for p in native.PREFETCH_CANDIDATES]
    assert calls[:2 * len(labels)] == [label for label in labels for _ in (1, 7)]  # each at 1 and K+1 rows in turn
    assert len(copies) == 1 and len(calls) == 2 * len(labels) * (calibration.REPS + 1)
    for p in native.PREFETCH_CANDIDATES:
        assert out["timings_ms"][p.label] == pytest.approx([1.0 + p.distance / 8192] * 2)
    assert setting[0] == native.Prefetch(512, native.Hint.T1)


@pytest.mark.usefixtures("one_thread")
@pytest.mark.skipif(not native.available(), reason=native.status()[1])
def test_loading_a_pair_sets_the_prefetch_its_verifiers_choice_carries(prefetch_timed, monkeypatch, tmp_path):
    """And where the verifier is not on specdec's kernels, the library's default; without the
    library a pair loads as on a machine that never had it."""
    from helpers import tiny_gguf

    from specdec.weights.loading import load_pair, unload
    tiny_gguf.install(monkeypatch, tmp_path, tiny_gguf.build(tmp_path / "gguf"))
    try:
        pair = load_pair(tiny_gguf.NAME, None, "cpu", "int4")
        unload(pair)
        assert native.prefetch() == pair.precision.prefetch == native.Prefetch(2048, native.Hint.NTA)
        unload(load_pair(tiny_gguf.NAME, None, "cpu", "float32"))
        assert native.prefetch() == native.DEFAULT_PREFETCH
        native.set_prefetch(native.Prefetch(0))
        monkeypatch.setattr(calibration, "calibrate", lambda variants, k: table(
            {v.label: [1.0, 2.0] if v.label == "float32" else [5.0, 5.0] for v in variants}))
        monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "without"))  # the table above names specdec's kernels
        with native.disabled():
            pair = load_pair(tiny_gguf.NAME, None, "cpu", "auto")
            unload(pair)
        assert pair.precision.label == "float32" and pair.precision.prefetch is None
        assert native.prefetch() == native.Prefetch(0) and prefetch_timed == ["int4 specdec"]
    finally:
        native.set_prefetch(native.DEFAULT_PREFETCH)
