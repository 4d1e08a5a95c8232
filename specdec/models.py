"""Model loading: the embedded pair, any Hugging Face id, local directory or GGUF file; pairing.

A pair is checked when it is loaded, never at its first round: the tokenizers must agree on every
shared id, and each model's KV cache must be able to roll back (the engine crops it every round).
"""
from __future__ import annotations

import ctypes
import hashlib
import socket
import sys
import threading
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import torch

from . import qwen2
from .config import ConfigError, DecodeConfig, validate_prompt
from .devices import resolve_device
from . import packed
from .embedded import (EMBEDDED, DEFAULT_DRAFT, DEFAULT_TARGET, GGUFWeights, ModelLoadError, Progress,
                       metadata, model_root, transformers_model)
from .kernels import PackedLinear
from .precision import Precision, choose, choose_draft

__all__ = ["DEFAULT_DRAFT", "DEFAULT_TARGET", "EMBEDDED", "ModelLoadError", "ModelPair", "load_pair",
           "resolve_device"]

DRAFT_VOCAB = 0  # ids the lean draft scores (0: all); a cut showed no clear gain (docs/results.md, levers)


def _hub_reachable() -> bool:
    try:
        socket.create_connection(("huggingface.co", 443), timeout=3).close()
        return True
    except OSError:
        return False


def draft_head_rows(tokenizer, n: int) -> torch.Tensor | None:
    """The draft's output rows when it scores only the ``n`` first ids (byte-level BPE assigns
    ids in merge order, so low ids are the frequent tokens) plus every special token."""
    if not n:
        return None
    special = [i for i in tokenizer.added_tokens_decoder if i >= n]
    return torch.tensor(sorted(set(range(n)) | set(special)))


GPU_PAD_ROWS = 16  # a GPU verifier's forwards are padded to this many rows: exact for K <= 15, trees of <= 15 nodes


def lean_options(device: torch.device, role: str) -> dict:
    """How the lean forward runs on ``device`` (see :mod:`specdec.qwen2`): the CPU's dynamic cache
    and batch-invariant kernels; on a GPU a static cache, the verifier padded to ``GPU_PAD_ROWS``
    rows, and CUDA graphs on CUDA."""
    from .graphs import available
    if device.type == "cpu":
        return {}
    return {"static": True, "pad_rows": GPU_PAD_ROWS if role == "target" else 0, "graphs": available(device)}


TRANSFORMERS = "transformers:"  # "transformers:embedded:...": an embedded model on transformers' own forward
PACK_FORMAT = 2  # bump when packed_state's names or a layer's state change: older files are rebuilt


def _say(progress: Progress | None, fraction: float, message: str) -> None:
    if progress:
        progress(fraction, message)
    else:
        print(message, file=sys.stderr)


def packed_file(spec, precision: Precision, device: torch.device, draft_vocab: int = 0) -> Path:
    """Where the layers of ``spec`` in ``precision`` for ``device`` are cached."""
    vocab = f"-vocab{draft_vocab}" if draft_vocab else ""
    return model_root(spec) / f"packed-{precision.cache_key(device)}{vocab}-f{PACK_FORMAT}.safetensors"


def _load_lean(spec, meta: Path, config, precision: Precision, name: str, role: str, progress: Progress | None,
               draft_vocab: int = 0, device: torch.device = torch.device("cpu"), keep: bool = False):
    """The embedded model on the lean forward: its packed layers from the cache when they are whole
    (checked, :mod:`specdec.packed`), else packed from the GGUF parts one tensor at a time and saved."""
    from transformers import GenerationConfig
    tokenizer = _tokenizer(meta)
    invariant = role == "target"
    options = dict(device=device, **lean_options(device, role))
    path = packed_file(spec, precision, device, draft_vocab if role == "draft" else 0)
    model = None
    if path.is_file():
        if progress:
            progress(0.4, f"{name}: loading its {precision.name} layers from the cache")
        try:
            packed.check(path)
            model = qwen2.LeanQwen2(config, packed.Reader(path, mapped=precision.maps_saved(device)), None,
                                    restore=partial(precision.restore, batch_invariant=invariant, device=device),
                                    **options)
        except packed.DamagedFile as e:
            _say(progress, 0.4, f"{name}: damaged cache file, rebuilding it from the GGUF parts ({e})")
            packed.remove(path)
    if model is None:
        if progress:
            progress(0.4, f"{name}: packing {precision.name} layers on {device.type} from the GGUF"
                          + (" (first run only)" if keep else ""))
        make = partial(precision.linear, batch_invariant=invariant, device=device)
        rows = draft_head_rows(tokenizer, draft_vocab) if role == "draft" else None
        model = qwen2.LeanQwen2(config, GGUFWeights(spec, meta, progress), make, precision.dense_dtype, rows,
                                **options)
        if keep:  # (a sweep over precisions, in notebook 04 and the benchmarks, leaves nothing behind)
            packed.write(path, model.packed_state(), {"model": spec.name, "precision": precision.name,
                                                     "format": PACK_FORMAT})
            for old in path.parent.glob("packed-*.safetensors"):  # older formats are never read again
                if not old.name.endswith(f"-f{PACK_FORMAT}.safetensors"):
                    packed.remove(old)
    model.generation_config = GenerationConfig.from_pretrained(str(meta))
    return model, tokenizer


_TOKENIZERS: dict[str, object] = {}


def _tokenizer(meta: Path):
    """The tokenizer of an embedded model's ``meta``, loaded once per content: the embedded pair
    ships the very same tokenizer files, and parsing them is a second of every start."""
    from transformers import AutoTokenizer
    digest = hashlib.sha256()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        digest.update((meta / name).read_bytes())
    key = digest.hexdigest()
    if key not in _TOKENIZERS:
        _TOKENIZERS[key] = AutoTokenizer.from_pretrained(str(meta))
    return _TOKENIZERS[key]


def _pack_linears(model: torch.nn.Module, precision: Precision, batch_invariant: bool) -> None:
    """Swap every nn.Linear of a transformers model for the chosen CPU representation."""
    for module in list(model.modules()):
        for child_name, child in list(module.named_children()):
            if type(child) is torch.nn.Linear:
                setattr(module, child_name, precision.linear(child.weight.detach(), child.bias, batch_invariant))


def load_model(name: str, device: torch.device, precision: Precision, role: str, progress: Progress | None = None,
               draft_vocab: int = 0, keep: bool = False):
    """Load (model, tokenizer) from an embedded name, a local directory or GGUF file, or a hub id;
    ``transformers:<embedded name>`` builds transformers' own model of an embedded GGUF (the
    benchmarks' and notebooks' reference forward).

    A Qwen2 model runs on the lean forward of :mod:`specdec.qwen2` on every device; any other
    on transformers', with its Linear layers swapped for the chosen representation on a CPU and
    in the chosen precision on a GPU. An embedded model's packed layers are read from the cache
    when there; ``keep`` saves them there when they had to be packed (``load_pair`` keeps what it
    chose; a sweep over precisions keeps nothing, so the cache holds only what runs).
    """
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    on_cpu = device.type == "cpu"
    if name.startswith(TRANSFORMERS) and name.removeprefix(TRANSFORMERS) in EMBEDDED:
        spec = EMBEDDED[name.removeprefix(TRANSFORMERS)]
        if progress:
            progress(0.3, f"{role}: building transformers' model of {spec.name} from its GGUF")
        model, tokenizer = transformers_model(spec, torch.float32 if on_cpu else precision.dense_dtype)
        return _finish_transformers(model, tokenizer, name, device, precision, role)
    if name in EMBEDDED:
        meta = metadata(EMBEDDED[name], progress)
        config = AutoConfig.from_pretrained(str(meta))
        if not qwen2.supports(config):
            raise ModelLoadError(f"{name}: an embedded model must be plain Qwen2 for the lean forward")
        return _load_lean(EMBEDDED[name], meta, config, precision, name, role, progress, draft_vocab, device, keep)
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
    return _finish_transformers(model, tokenizer, name, device, precision, role)


def _finish_transformers(model, tokenizer, name: str, device: torch.device, precision: Precision, role: str):
    on_cpu = device.type == "cpu"
    if not on_cpu and precision.name == "int8":
        raise ModelLoadError(f"{role}: int8 weight-only on {device.type} needs the lean Qwen2 forward, which {name!r} "
                             "does not take; use --precision auto, bfloat16 or float16")
    model.to(device).eval()
    if on_cpu:
        _pack_linears(model, precision, batch_invariant=role == "target")
    return model, tokenizer


def check_compatible(target_tok, draft_tok, target_rows: int, draft_rows: int) -> int:
    """Return the shared vocabulary size V, or raise if the pair cannot share token ids.

    V counts real tokens only: output rows beyond the tokenizer (Qwen pads its output layer to a
    multiple of 128) are padding, never a token, so p and q alike are cut to V and no padding id
    can be sampled."""
    if target_tok is draft_tok:  # one tokenizer (the embedded pair's): only the output rows can differ
        return _real_rows(len(target_tok), target_rows, draft_rows)
    shared = min(len(target_tok), len(draft_tok))
    t_ids = target_tok.convert_ids_to_tokens(list(range(shared)))
    d_ids = draft_tok.convert_ids_to_tokens(list(range(shared)))
    mismatch = next((i for i, (a, b) in enumerate(zip(t_ids, d_ids)) if a != b), None)
    if mismatch is not None:
        raise ModelLoadError(f"draft and target tokenizers disagree at id {mismatch} "
                             f"({d_ids[mismatch]!r} vs {t_ids[mismatch]!r}): pick a draft from the target's family")
    return _real_rows(max(len(target_tok), len(draft_tok)), target_rows, draft_rows)


def _real_rows(real: int, target_rows: int, draft_rows: int) -> int:
    if min(target_rows, draft_rows) < real:
        raise ModelLoadError(f"draft and target vocabularies differ in real tokens ({draft_rows} vs {target_rows} "
                             f"rows for {real} tokens), not just in padding rows")
    return real


def check_rollback(model, role: str, name: str) -> None:
    """The engine crops both KV caches every round. A model with recurrent layers (nothing to crop)
    or sliding-window layers (which cannot be cropped once the window is full) cannot take part,
    and is refused when the pair is loaded rather than failing at some later round."""
    if isinstance(model, qwen2.LeanQwen2):
        return  # its KVCache keeps every position and crops by length
    from transformers import cache_utils
    recurrent = getattr(cache_utils, "LinearAttentionCacheLayerMixin", ())
    sliding = cache_utils.DynamicSlidingWindowLayer
    for i, layer in enumerate(cache_utils.DynamicCache(config=model.config).layers):
        kind = ("recurrent (linear-attention) state" if isinstance(layer, recurrent) else
                "sliding-window attention" if isinstance(layer, sliding) else
                None if layer.is_croppable else type(layer).__name__)
        if kind:
            raise ModelLoadError(f"{role}: {name!r} cannot take part in speculative decoding: layer {i} keeps a "
                                 f"{kind} cache, which cannot be rolled back to drop rejected drafts; pick a model "
                                 "with full attention in every layer")


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
    draft_precision: Precision | None = None  # the draft's own choice (None: as the verifier's)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)  # models are shared: serialise use

    def __post_init__(self):
        check_rollback(self.target, "target", self.target_name)
        if self.draft is not None:
            check_rollback(self.draft, "draft", self.draft_name or "draft")
        if not self.vocab_size:  # real tokens only: padding rows of the output layer are never sampled
            self.vocab_size = min([len(self.tokenizer)] + [output_rows(m) for m in (self.target, self.draft) if m is not None])
        configs = [self.target.config] + ([self.draft.config] if self.draft is not None else [])
        self.max_positions = min(getattr(c, "max_position_embeddings", 2048) for c in configs)
        eos = {self.tokenizer.eos_token_id, *_as_list(self.target.generation_config.eos_token_id)}
        self.stop_ids = frozenset(i for i in eos if i is not None)

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)

    def token_text(self, token_id: int) -> str:
        return self.tokenizer.decode([token_id], skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def encode(self, prompt: str, chat: bool = True) -> list[int]:
        return self.encode_marked(prompt, chat)[0]

    def encode_marked(self, prompt: str, chat: bool = True) -> tuple[list[int], tuple[bool, ...]]:
        """The prompt's ids (through the chat template unless ``chat`` is False) and, per id,
        whether it is the template's markup (True) rather than the user's own text."""
        validate_prompt(prompt)
        if chat and getattr(self.tokenizer, "chat_template", None):
            ids, hidden = self._encode_chat(prompt)
        else:
            ids = self.tokenizer(prompt)["input_ids"]
            hidden = tuple(i in self.tokenizer.all_special_ids for i in ids)
        if not ids:
            raise ConfigError("prompt must encode to at least one token (got none from the tokenizer)", "prompt")
        if len(ids) >= self.max_positions:
            raise ConfigError(f"prompt must be shorter than the context of {self.max_positions} tokens "
                              f"(got {len(ids)} tokens)", "prompt")
        return list(ids), hidden

    def _encode_chat(self, prompt: str) -> tuple[list[int], tuple[bool, ...]]:
        """The template inserts the prompt verbatim: the characters it adds are the difference
        between the rendering with the prompt and with an empty one. A token is the user's only
        when all of its characters are; where offsets are not to be had, only special tokens
        count as markup."""
        render = lambda content: self.tokenizer.apply_chat_template(  # noqa: E731
            [{"role": "user", "content": content}], tokenize=False, add_generation_prompt=True)
        full, empty = render(prompt), render("")
        prefix = next((i for i, (a, b) in enumerate(zip(full, empty)) if a != b), len(empty))
        start = next((i for i in range(prefix, -1, -1) if full == empty[:i] + prompt + empty[i:]), None)
        if start is None or not self.tokenizer.is_fast:
            ids = self.tokenizer(full, add_special_tokens=False)["input_ids"]
            return ids, tuple(i in self.tokenizer.all_special_ids for i in ids)
        enc = self.tokenizer(full, add_special_tokens=False, return_offsets_mapping=True)
        end = start + len(prompt)
        return enc["input_ids"], tuple(not (start <= a and b <= end) for a, b in enc["offset_mapping"])

    def param_counts(self) -> dict[str, int]:
        """Parameters of the original models (embeddings included), whatever their representation."""
        out = {"target": _num_parameters(self.target)}
        if self.draft is not None:
            out["draft"] = _num_parameters(self.draft)
        return out

    @staticmethod
    def parameter_breakdown(model) -> dict:
        """Total parameters, the embedding table and the output layer, and whether the original ties
        the two (then a model's published size counts that table once)."""
        hidden = model.config.hidden_size
        embedding = (model.embed.shape[0] if isinstance(model, qwen2.LeanQwen2)
                     else model.get_input_embeddings().weight.shape[0]) * hidden
        return {"total": _num_parameters(model), "embedding": embedding, "output": output_rows(model) * hidden,
                "tied": bool(getattr(model.config, "tie_word_embeddings", False))}


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


def model_config(name: str, progress: Progress | None = None):
    """The transformers config of an embedded name (converted first if need be), a local
    directory or GGUF file, or a hub id."""
    from transformers import AutoConfig
    if name.removeprefix(TRANSFORMERS) in EMBEDDED:
        return AutoConfig.from_pretrained(str(metadata(EMBEDDED[name.removeprefix(TRANSFORMERS)], progress)))
    path = Path(name).expanduser()
    try:
        if path.is_file() and path.suffix == ".gguf":
            return AutoConfig.from_pretrained(str(path.parent), gguf_file=path.name)
        return AutoConfig.from_pretrained(str(path) if path.exists() else name,
                                          local_files_only=not path.exists() and not _hub_reachable())
    except (OSError, ValueError) as e:
        raise ModelLoadError(f"draft: cannot read the config of {name!r} ({str(e).splitlines()[0][:160]}); "
                             f"embedded models work offline: {', '.join(EMBEDDED)}") from None


def load_pair(target: str = DEFAULT_TARGET, draft: str | None = DEFAULT_DRAFT, device: str | None = None,
              precision: str | None = None, progress: Progress | None = None, k: int = DecodeConfig.k,
              draft_vocab: int = DRAFT_VOCAB, draft_precision: str | None = "auto") -> ModelPair:
    """Load (once per process) the verifier and the draft model and check they can be paired.

    ``precision`` (the verifier's) and ``draft_precision`` are ``auto`` (measured per machine and
    per model, see :mod:`specdec.precision`) or a name; ``draft_vocab`` > 0 lets a lean draft
    score only that many ids (0: all)."""
    dev = resolve_device(device)
    if progress and dev.type == "cpu":
        progress(0.0, "choosing kernels for this CPU (timed once per machine, about two minutes, then cached)")
    prec = choose(dev, precision, k)
    if not (isinstance(draft_vocab, int) and draft_vocab >= 0):
        raise ConfigError(f"draft_vocab must be an integer >= 0, 0 for the full vocabulary (got {draft_vocab!r})")
    sub = (lambda lo, hi: (lambda f, m: progress(lo + (hi - lo) * f, m))) if progress else (lambda lo, hi: None)
    dprec = choose_draft(dev, draft_precision, model_config(draft, sub(0.5, 0.6))) if draft else None
    key = (target, draft, str(dev), prec.label, dprec and dprec.label, draft_vocab)
    with _PAIRS_LOCK:
        if key in _PAIRS:
            return _PAIRS[key]
        _return_freed_memory()
        target_model, tokenizer = load_model(target, dev, prec, "target", sub(0.0, 0.5 if draft else 1.0), keep=True)
        draft_model = None
        if draft:
            draft_model, draft_tok = load_model(draft, dev, dprec, "draft", sub(0.5, 1.0), draft_vocab, keep=True)
            vocab = check_compatible(tokenizer, draft_tok, output_rows(target_model), output_rows(draft_model))
        else:
            vocab = min(len(tokenizer), output_rows(target_model))
        pair = ModelPair(target_model, tokenizer, draft_model, target, draft, vocab, dev, prec, dprec)
        if progress:
            progress(1.0, "models ready")
        _PAIRS[key] = pair
        return pair
