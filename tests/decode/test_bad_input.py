"""Every user mistake gives a one-line error naming the field, exit status 2 and no traceback."""
import hashlib

import pytest
from helpers import tiny

from specdec import ConfigError, DecodeConfig, ModelLoadError, SamplingConfig
from specdec.cli import main
from specdec.weights import catalogue, loading
from specdec.weights.catalogue import EmbeddedModel
from specdec.weights.gguf import assemble_gguf
from specdec.weights.pairing import check_compatible


def cli_error(capsys, *args) -> str:
    code = main(["generate", "--prompt", "hi", *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and "Traceback" not in "\n".join(err)
    assert err[-1].startswith("error: ")
    return err[-1]


@pytest.mark.parametrize("args, field", [
    (["--k", "0"], "k must be an integer in [1, 32]"),
    (["--k", "33"], "k must be an integer in [1, 32]"),
    (["--temperature", "-0.1"], "temperature must be 0 (greedy) or a finite number >= 0.01"),
    (["--temperature", "nan"], "temperature must be 0 (greedy) or a finite number >= 0.01"),
    (["--temperature", "inf"], "temperature must be 0 (greedy) or a finite number >= 0.01"),
    (["--temperature", "1e-45"], "temperature must be 0 (greedy) or a finite number >= 0.01"),
    (["--top-p", "0"], "top_p must be a number in (0, 1]"),
    (["--top-p", "1.5"], "top_p must be a number in (0, 1]"),
    (["--top-k", "-1"], "top_k must be an integer >= 0"),
    (["--max-new-tokens", "0"], "max_new_tokens must be an integer >= 1"),
    (["--device", "tpu"], "device must be one of auto, cpu, cuda, mps"),
    (["--drafter", "oracle"], "drafter must be one of model, hybrid, tree, lookup, suffix, suffix-model, self, none"),
    (["--precision", "int3"], "precision must be one of auto, float32, bfloat16, float16, int8, int4"),
])
def test_cli_rejects_bad_settings(capsys, args, field):
    assert field in cli_error(capsys, *args)


def test_cli_rejects_an_empty_prompt(capsys):
    assert main(["generate", "--prompt", "   "]) == 2
    assert capsys.readouterr().err.strip() == "error: prompt must be a non-empty string"


def test_unknown_model_while_offline_names_the_embedded_default(capsys, monkeypatch):
    monkeypatch.setattr(loading, "_hub_reachable", lambda: False)
    msg = cli_error(capsys, "--target", "no-such-org/no-such-model", "--drafter", "lookup")
    assert "target: cannot load 'no-such-org/no-such-model'" in msg and catalogue.DEFAULT_TARGET in msg


def test_configs_validate_on_construction():
    with pytest.raises(ConfigError, match="seed"):
        DecodeConfig(seed=-1)
    with pytest.raises(ConfigError, match="top_k"):
        SamplingConfig(top_k=1.5)
    assert SamplingConfig(0).greedy and not SamplingConfig(0.5).greedy


def test_incompatible_tokenizers_are_refused():
    a, b = tiny.tokenizer(), tiny.tokenizer()
    b.add_tokens(["extra"])  # same prefix, one more real token than the models have rows for
    with pytest.raises(ModelLoadError, match="not just in padding rows"):
        check_compatible(a, b, tiny.V, tiny.V)
    from tokenizers import Tokenizer
    from tokenizers import models as tm
    from transformers import PreTrainedTokenizerFast
    other = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(tm.WordLevel(
        {f"x{i}": i for i in range(tiny.V)}, unk_token="x0")))
    with pytest.raises(ModelLoadError, match="disagree at id 0"):
        check_compatible(a, other, tiny.V + 8, tiny.V + 8)
    # padding rows may differ; the shared vocabulary is the real tokens only, so padding ids are never sampled
    assert check_compatible(a, tiny.tokenizer(), tiny.V + 8, tiny.V + 4) == tiny.V


def _fake_parts(tmp_path, monkeypatch, payloads):
    import sys
    import types
    for i, data in enumerate(payloads, 1):
        f = tmp_path / f"part{i:02d}.bin"
        f.write_bytes(data)
        mod = types.ModuleType(f"fakepart{i}")
        mod.get_part_path = lambda f=f: str(f)
        monkeypatch.setitem(sys.modules, f"fakepart{i}", mod)


def test_missing_part_package_names_the_package(tmp_path):
    spec = EmbeddedModel("embedded:test", "no_such_part_pkg", 2, "1.0", "0" * 64)
    with pytest.raises(ModelLoadError, match=r"pip install no-such-part-pkg1==1.0"):
        assemble_gguf(spec, tmp_path / "out")


def test_checksum_mismatch_leaves_nothing_behind(tmp_path, monkeypatch):
    _fake_parts(tmp_path, monkeypatch, [b"abc", b"def"])
    bad = EmbeddedModel("embedded:test", "fakepart", 2, "1.0", "0" * 64)
    with pytest.raises(ModelLoadError, match="checksum mismatch.*--force-reinstall --no-deps fakepart1==1.0"):
        assemble_gguf(bad, tmp_path / "out")
    assert list((tmp_path / "out").iterdir()) == []  # no half-written or corrupt file
    good = EmbeddedModel("embedded:test", "fakepart", 2, "1.0", hashlib.sha256(b"abcdef").hexdigest())
    assert assemble_gguf(good, tmp_path / "out").read_bytes() == b"abcdef"


def test_embedded_parts_are_pinned_in_requirements():
    from pathlib import Path
    reqs = (Path(__file__).resolve().parents[2] / "requirements.txt").read_text()
    for spec in catalogue.EMBEDDED.values():
        for pkg in spec.packages():
            assert pkg in reqs
