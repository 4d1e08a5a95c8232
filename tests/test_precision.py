"""The per-machine choice of representation, with capabilities and timings faked."""
import json

import pytest
import torch

from specdec import precision as P
from specdec.config import ConfigError


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    return tmp_path


@pytest.mark.parametrize("caps, expected", [
    ({"native_bf16": False, "fbgemm": True, "isa": "AVX2"}, ["float32", "float16", "int8", "int4"]),  # AMD EPYC
    ({"native_bf16": True, "fbgemm": True, "isa": "AVX512"},
     ["float32", "bfloat16", "float16", "int8", "int4"]),                                              # Xeon AMX
    ({"native_bf16": False, "fbgemm": False, "isa": "DEFAULT"}, ["float32"]),                         # e.g. ARM
])
def test_candidates_follow_capabilities(caps, expected):
    assert P.cpu_candidates(caps) == expected  # emulated bf16 is never a candidate


def test_this_machine_has_float32_at_least():
    assert P.cpu_candidates()[0] == "float32"
    assert set(P.cpu_capabilities()) == {"native_bf16", "fbgemm", "isa"}


@pytest.mark.parametrize("timings, expected", [
    # an AVX2 machine without native bf16: int8 wins by far
    ({"float32": [4.3, 11.2], "float32 transposed": [4.3, 4.2], "int8": [0.41, 0.76], "int4": [1.0, 2.8]},
     ("int8", False)),
    # an AMX machine: bf16 is flat in the rows and beats int8 at 5 rows
    ({"float32": [1.3, 2.4], "float32 transposed": [1.2, 2.9], "bfloat16": [1.08, 1.31], "int8": [0.9, 1.6]},
     ("bfloat16", False)),
    # float32 only, where the transposed orientation is faster
    ({"float32": [4.3, 11.2], "float32 transposed": [4.3, 4.2]}, ("float32", True)),
])
def test_pick_is_the_lowest_cost_at_1_and_k_plus_1_rows(timings, expected):
    p = P.pick(timings, 4, "Some CPU")
    assert (p.name, p.transposed) == expected
    assert p.reason.startswith(expected[0]) and "fastest here" in p.reason and "Some CPU" in p.reason


def test_auto_measures_once_and_caches_per_machine(cache, monkeypatch):
    calls = []

    def fake(names, k):
        calls.append(k)
        return {"float32": [5.0, 5.0], "int8": [1.0, 2.0]}

    monkeypatch.setattr(P, "calibrate", fake)
    cpu = torch.device("cpu")
    assert P.choose(cpu, "auto", 4).name == "int8"
    assert P.choose(cpu, "auto", 4).name == "int8"
    assert calls == [4]                                  # the second choice read the cache
    (path,) = (cache / "calibration").glob("*.json")
    saved = json.loads(path.read_text())
    assert saved["cpu"] == P.cpu_description() and saved["timings_ms"]["int8"] == [1.0, 2.0]
    P.choose(cpu, "auto", 6)
    assert calls == [4, 6]                               # K is part of the key: K+1 rows differ


def test_gpus_take_their_native_half_precision():
    assert P.choose(torch.device("cuda"), "auto").name == "bfloat16"
    assert P.choose(torch.device("mps"), "auto").name == "float16"
    with pytest.raises(ConfigError, match="precision 'int8' is CPU-only"):
        P.choose(torch.device("cuda"), "int8")


def test_bad_or_unavailable_precision_is_a_clear_error(monkeypatch):
    with pytest.raises(ConfigError, match="precision must be one of auto, float32, bfloat16, float16, int8, int4"):
        P.choose(torch.device("cpu"), "int3")
    monkeypatch.setattr(P, "cpu_candidates", lambda: ["float32"])
    with pytest.raises(ConfigError, match="precision 'int8' has no native kernel on this CPU"):
        P.choose(torch.device("cpu"), "int8")
