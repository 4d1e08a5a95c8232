"""Model loading: the embedded pair, any Hugging Face id, local directory or GGUF file, and
:func:`load_pair`, which loads the verifier and the draft once per process and pairs them
(:mod:`specdec.weights.pairing`).

The representation each model runs in is chosen first (:mod:`specdec.model.precision`); loading then
asks it once for its layers (:class:`specdec.model.precision.Layers`) and builds the model from them.
"""
from __future__ import annotations

import ctypes
import socket
import threading
from pathlib import Path

import torch

from specdec.model import native, qwen2
from specdec.model.devices import resolve_device
from specdec.model.precision import Layers, Precision, choose, choose_draft
from specdec.options import ConfigError
from specdec.weights import packed
from specdec.weights.catalogue import DEFAULT_DRAFT, DEFAULT_TARGET, EMBEDDED
from specdec.weights.errors import ModelLoadError
from specdec.weights.gguf import GGUFWeights, metadata, transformers_model
from specdec.weights.pairing import ModelPair, check_compatible, output_rows
from specdec.weights.progress import Progress, report
from specdec.weights.store import (
    PACK_FORMAT,
    DamagedFile,
    check,
    packed_file,
    read_chunks,
    remove,
    sha256,
)

DRAFT_VOCAB = 0  # ids the lean draft scores (0: all); a cut showed no clear gain (docs/results.md, levers)
GPU_PAD_ROWS = 16  # a GPU verifier's forwards are padded to this many rows: exact for K <= 15, trees of <= 15 nodes
TRANSFORMERS = "transformers:"  # "transformers:embedded:...": an embedded model on transformers' own forward


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


def lean_options(device: torch.device, role: str) -> dict:
    """How the lean forward runs on ``device`` (see :mod:`specdec.model.qwen2`): the CPU's dynamic cache
    and batch-invariant kernels; on a GPU a static cache, the verifier padded to ``GPU_PAD_ROWS``
    rows, and CUDA graphs on CUDA."""
    from specdec.model.graphs import available
    if device.type == "cpu":
        return {}
    return {"static": True, "pad_rows": GPU_PAD_ROWS if role == "target" else 0, "graphs": available(device)}


def _load_lean(spec, meta: Path, config, precision: Precision, name: str, role: str, progress: Progress | None,
               draft_vocab: int = 0, device: torch.device = torch.device("cpu"), keep: bool = False):
    """The embedded model on the lean forward: its packed layers from the cache when they are whole
    (checked, :mod:`specdec.weights.store`), else packed from the GGUF parts one tensor at a time and saved."""
    from transformers import GenerationConfig
    tokenizer = _tokenizer(meta)
    layers = precision.layers(device, batch_invariant=role == "target")  # the verifier's rows must not interact
    options = dict(device=device, **lean_options(device, role))
    path = packed_file(spec, precision, device, draft_vocab if role == "draft" else 0)
    model = None
    if path.is_file():
        report(progress, 0.4, f"{name}: loading its {precision.name} layers from the cache")
        try:
            check(path)
            model = qwen2.LeanQwen2(config, packed.Reader(path, mapped=layers.maps_saved), None,
                                    restore=layers.restore, **options)
        except DamagedFile as e:
            report(progress, 0.4, f"{name}: damaged cache file, rebuilding it from the GGUF parts ({e})", warning=True)
            remove(path)
    if model is None:
        report(progress, 0.4, f"{name}: packing {precision.name} layers on {device.type} from the GGUF"
                              + (" (first run only)" if keep else ""))
        rows = draft_head_rows(tokenizer, draft_vocab) if role == "draft" else None
        model = qwen2.LeanQwen2(config, GGUFWeights(spec, meta, progress), layers.build, precision.dense_dtype, rows,
                                **options)
        if keep:  # (a sweep over precisions, in notebook 04 and the benchmarks, leaves nothing behind)
            packed.write(path, model.packed_state(), {"model": spec.name, "precision": precision.name,
                                                     "format": PACK_FORMAT})
            for old in path.parent.glob("packed-*.safetensors"):  # older formats are never read again
                if not old.name.endswith(f"-f{PACK_FORMAT}.safetensors"):
                    remove(old)
    model.generation_config = GenerationConfig.from_pretrained(str(meta))
    return model, tokenizer


_TOKENIZERS: dict[str, object] = {}


def _tokenizer(meta: Path):
    """The tokenizer of an embedded model's ``meta``, loaded once per content: the embedded pair
    ships the very same tokenizer files, and parsing them is a second of every start."""
    from transformers import AutoTokenizer
    key = sha256(read_chunks([meta / "tokenizer.json", meta / "tokenizer_config.json"]))
    if key not in _TOKENIZERS:
        _TOKENIZERS[key] = AutoTokenizer.from_pretrained(str(meta))
    return _TOKENIZERS[key]


def _pack_linears(model: torch.nn.Module, layers: Layers) -> None:
    """Swap every nn.Linear of a transformers model for the chosen CPU representation."""
    for module in list(model.modules()):
        for child_name, child in list(module.named_children()):
            if type(child) is torch.nn.Linear:
                setattr(module, child_name, layers.build(child.weight.detach(), child.bias))


def load_model(name: str, device: torch.device, precision: Precision, role: str, progress: Progress | None = None,
               draft_vocab: int = 0, keep: bool = False):
    """Load (model, tokenizer) from an embedded name, a local directory or GGUF file, or a hub id;
    ``transformers:<embedded name>`` builds transformers' own model of an embedded GGUF (the
    benchmarks' and notebooks' reference forward).

    A Qwen2 model runs on the lean forward of :mod:`specdec.model.qwen2` on every device; any other
    on transformers', with its Linear layers swapped for the chosen representation on a CPU and
    in the chosen precision on a GPU. An embedded model's packed layers are read from the cache
    when there; ``keep`` saves them there when they had to be packed (``load_pair`` keeps what it
    chose; a sweep over precisions keeps nothing, so the cache holds only what runs).
    """
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    on_cpu = device.type == "cpu"
    if name.startswith(TRANSFORMERS) and name.removeprefix(TRANSFORMERS) in EMBEDDED:
        spec = EMBEDDED[name.removeprefix(TRANSFORMERS)]
        report(progress, 0.3, f"{role}: building transformers' model of {spec.name} from its GGUF")
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
        # Without this, an unreachable hub is retried for a long while before the same failure.
        kwargs["local_files_only"] = not _hub_reachable()
    report(progress, 0.3, f"{role}: loading {name}")
    tok_kwargs = {k: v for k, v in kwargs.items() if k != "dtype"}
    try:
        model = AutoModelForCausalLM.from_pretrained(source, **kwargs)
        tokenizer = AutoTokenizer.from_pretrained(source, **tok_kwargs)
    except (OSError, ValueError) as e:
        raise _cannot_load(role, name, str(e).splitlines()[0][:160]) from None
    return _finish_transformers(model, tokenizer, name, device, precision, role)


def _cannot_load(role: str, name: str, why: str) -> ModelLoadError:
    return ModelLoadError(f"{role}: cannot load {name!r}: not an embedded model, a local directory or .gguf file, or "
                          f"a model reachable on the Hugging Face hub ({why}). Embedded models work offline: "
                          f"{', '.join(EMBEDDED)}")


def check_source(name: str, role: str) -> None:
    """Raise the loader's own error where ``name`` names nothing that could load here: not an embedded
    model, no such file or directory, and a hub id neither in this machine's cache nor reachable. It
    loads nothing, so it can be asked before a pair in use is released for another (the app)."""
    if name.removeprefix(TRANSFORMERS) in EMBEDDED or Path(name).expanduser().exists():
        return
    from huggingface_hub import try_to_load_from_cache
    try:
        cached = isinstance(try_to_load_from_cache(name, "config.json"), str)
    except ValueError:  # not even the shape of a hub id ("owner/name")
        cached = False
    if not cached and not _hub_reachable():
        raise _cannot_load(role, name, "no such file or directory, and not in this machine's Hugging Face cache")


def _finish_transformers(model, tokenizer, name: str, device: torch.device, precision: Precision, role: str):
    on_cpu = device.type == "cpu"
    if not on_cpu and precision.name == "int8":
        raise ModelLoadError(f"{role}: int8 weight-only on {device.type} needs the lean Qwen2 forward, which {name!r} "
                             "does not take; use --precision auto, bfloat16 or float16")
    model.to(device).eval()
    if on_cpu:
        _pack_linears(model, precision.layers(device, batch_invariant=role == "target"))
    return model, tokenizer


def model_config(name: str, progress: Progress | None = None):
    """The transformers config of an embedded name (its metadata made first if need be), a local
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


M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3   # glibc's mallopt parameters
LOADING_MALLOC = {M_MMAP_THRESHOLD: 1 << 20, M_TRIM_THRESHOLD: 128 << 10}
DECODING_MALLOC = {M_MMAP_THRESHOLD: 32 << 20, M_TRIM_THRESHOLD: 256 << 20}


def _mallopt(settings: dict[int, int]) -> bool:
    """Set glibc's allocator parameters; False where the C library is not glibc (nothing to do)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        return all(libc.mallopt(param, value) == 1 for param, value in settings.items())
    except (OSError, AttributeError):
        return False


def _return_freed_memory() -> bool:
    """For loading: glibc raises its mmap threshold after large frees, so later large temporaries (the
    float32 weights being packed) come from a heap that is not returned to the system; fixing the
    threshold at 1 MiB (and trimming the heap's free top, glibc's default) keeps a default run's peak
    memory close to what the models need."""
    return _mallopt(LOADING_MALLOC)


def _keep_freed_memory() -> bool:
    """For decoding: a round's temporaries (the verifier's (K+1) x V logits and probabilities, 4.3 MB
    each at V = 151936, the draft's rows, each layer's activations) above loading's 1 MiB threshold are
    mapped at each allocation and unmapped at each free, and the heap's free top below it is given back
    at each trim: every round then faults in thousands of fresh zeroed pages. Kept in the heap (mmap
    above 32 MiB, trim above 256 MiB), they are reused: on a Zen 3 a K = 6 round of the embedded pair
    went from 231 to 212 ms (page faults of a 128-token run 701k -> 173k), peak memory unchanged."""
    return _mallopt(DECODING_MALLOC)


_PAIRS: dict[tuple, ModelPair] = {}
_PAIRS_LOCK = threading.Lock()


def load_pair(target: str = DEFAULT_TARGET, draft: str | None = DEFAULT_DRAFT, device: str | None = None,
              precision: str | None = None, progress: Progress | None = None,
              draft_vocab: int = DRAFT_VOCAB, draft_precision: str | None = "auto") -> ModelPair:
    """Load (once per process) the verifier and the draft model and check they can be paired.

    ``precision`` (the verifier's) and ``draft_precision`` are ``auto`` (measured per machine and
    per model, see :mod:`specdec.model.precision`) or a name; ``draft_vocab`` > 0 lets a lean draft
    score only that many ids (0: all). Loading does not depend on the decoding settings: one pair
    serves every K. On a CPU it sets specdec's kernels' prefetch to the one timed with the
    verifier's choice (the library's default where there is none); it leaves glibc's allocator set for
    decoding (:func:`_keep_freed_memory`)."""
    dev = resolve_device(device)
    _return_freed_memory()  # the kernels' timing and the packing below make large temporaries
    check_source(target, "target")  # a name that can load nothing, said before minutes of kernel timing
    if draft:
        check_source(draft, "draft")
    if dev.type == "cpu":
        report(progress, 0.0, "choosing kernels for this CPU (timed once per machine, about two minutes, then cached)")
    prec = choose(dev, precision)
    if not (isinstance(draft_vocab, int) and draft_vocab >= 0):
        raise ConfigError(f"draft_vocab must be an integer >= 0, 0 for the full vocabulary (got {draft_vocab!r})")
    sub = (lambda lo, hi: (lambda f, m: progress(lo + (hi - lo) * f, m))) if progress else (lambda lo, hi: None)
    dprec = choose_draft(dev, draft_precision, model_config(draft, sub(0.5, 0.6))) if draft else None
    if dev.type == "cpu" and native.available():  # one setting for every call of the library: the verifier's
        native.set_prefetch(prec.prefetch or native.DEFAULT_PREFETCH)
    key = (target, draft, str(dev), prec.label, dprec and dprec.label, draft_vocab)
    with _PAIRS_LOCK:
        if key in _PAIRS:
            _keep_freed_memory()
            return _PAIRS[key]
        target_model, tokenizer = load_model(target, dev, prec, "target", sub(0.0, 0.5 if draft else 1.0), keep=True)
        draft_model = None
        if draft:
            draft_model, draft_tok = load_model(draft, dev, dprec, "draft", sub(0.5, 1.0), draft_vocab, keep=True)
            vocab = check_compatible(tokenizer, draft_tok, output_rows(target_model), output_rows(draft_model))
        else:
            vocab = min(len(tokenizer), output_rows(target_model))
        pair = ModelPair(target_model, tokenizer, draft_model, target, draft, vocab, dev, prec, dprec)
        report(progress, 1.0, "models ready")
        _keep_freed_memory()
        _PAIRS[key] = pair
        return pair


def unload(pair: ModelPair) -> None:
    """Forget ``pair`` in the per-process memo of :func:`load_pair`, so that its memory goes once
    its last user lets go of it (the app, switching pairs on a machine with room for one)."""
    with _PAIRS_LOCK:
        for key in [k for k, p in _PAIRS.items() if p is pair]:
            del _PAIRS[key]
