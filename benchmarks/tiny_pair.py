"""The tiny model pair: random Qwen2 models of the real architecture and a word-level tokenizer,
built in-process from configs (no download), in seconds.

The one builder for the tests (``tests/helpers/tiny.py`` reads it from here) and for the
benchmarks' ``--tiny`` mode, where every script then runs end to end and measures nothing but
itself (tests/test_benchmarks.py). ``load`` is where a script picks the tiny pair or the real one
named on its command line; :func:`loaders` gives a script that loads more than one pair (other
representations, transformers' forward) the loaders and kernel timings of one or the other."""
from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from benchmarks.common import ROOT
from specdec.model import calibration
from specdec.model.precision import CALIBRATION_K, Precision, cpu_variants
from specdec.weights.pairing import ModelPair

V = 64          # real tokens; the models get padding rows beyond them, Qwen-style
EOS = V - 1
TARGET, DRAFT = "tiny-target", "tiny-draft"  # the benchmarks' tiny pair, by the names its loaders take
NO_GGUF = "--tiny: the tiny random models have no GGUF for llama.cpp"


def tokenizer(vocab: int = V) -> PreTrainedTokenizerFast:
    """Words ``w0`` .. ``w<vocab-2>`` and ``<eos>``, one id each, split on whitespace."""
    words = {f"w{i}": i for i in range(vocab - 1)} | {"<eos>": vocab - 1}
    tok = Tokenizer(models.WordLevel(words, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", unk_token="w0")


def model(seed: int, rows: int = V + 8, layers: int = 2, hidden: int = 32, scale: float = 1.0,
          positions: int = 256) -> Qwen2ForCausalLM:
    """A random Qwen2 of ``rows`` output rows (the V real tokens, then padding that scores nothing),
    seeded; ``scale`` sharpens its distributions (larger: fewer near-ties, acceptance that varies
    with K and T)."""
    torch.manual_seed(seed)
    cfg = Qwen2Config(vocab_size=rows, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=positions,
                      eos_token_id=EOS, tie_word_embeddings=False)
    m = Qwen2ForCausalLM(cfg).eval()
    with torch.no_grad():
        m.lm_head.weight.mul_(scale)
        m.lm_head.weight[V:] = 0      # padding rows carry no real token
    return m


def noisy_copy(m: Qwen2ForCausalLM, seed: int, noise: float) -> Qwen2ForCausalLM:
    """A draft that agrees with ``m`` often but not always, like a real small sibling model."""
    d = copy.deepcopy(m)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for w in d.parameters():
            w.add_(noise * w.std() * torch.randn(w.shape, generator=g))
    return d


def lean(m: Qwen2ForCausalLM, precision: str = "float32", batch_invariant: bool = True, transposed: bool = False,
         device: str = "cpu", kernel: str = "", **options):
    """The same weights on specdec's lean Qwen2 forward, in a representation (and ``kernel``, "" for the
    one preferred here) for ``device``; ``options`` as :class:`~specdec.model.qwen2.LeanQwen2` takes them
    (static, pad_rows, graphs, complex_rope, head_rows)."""
    from specdec.model.qwen2 import LeanQwen2
    make = Precision(precision, "test", transposed, kernel).layers(torch.device(device), batch_invariant).build
    out = LeanQwen2(m.config, {k: v.detach().clone() for k, v in m.state_dict().items()}, make,
                    device=device, **options)
    out.generation_config = m.generation_config
    return out


def pair(target, draft=None, precision: Precision | None = None) -> ModelPair:
    """``target`` verified, ``draft`` (if any) drafting, with the word-level tokenizer."""
    return ModelPair(target=target, tokenizer=tokenizer(), draft=draft, target_name=TARGET,
                     draft_name=None if draft is None else DRAFT,
                     **({"precision": precision, "draft_precision": precision} if precision else {}))


def prompt_ids(n: int = 6, seed: int = 0) -> list[int]:
    """``n`` random real token ids (never the EOS), seeded."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, V - 1, (n,), generator=g).tolist()


def repeating_prompt(seed: int, length: int = 12) -> list[int]:
    """Token ids that repeat their first half, so prompt lookup finds matches."""
    half = prompt_ids(length // 2, seed)
    return half + half


@functools.cache
def _originals() -> dict[str, Qwen2ForCausalLM]:
    """The benchmarks' tiny pair by name: wider and sharper than the tests' default models, so
    acceptance varies with K and T. Built once per process and never changed: whoever runs them gets
    a copy or their weights repacked."""
    target = model(0, rows=V + 16, hidden=64, scale=4.0, positions=512)  # rows: torch's int4 packs 16 at a time
    return {TARGET: target, DRAFT: noisy_copy(target, 1, 0.3)}


def benchmark_pair(lean_forward: bool = False) -> ModelPair:
    """The benchmarks' tiny pair in float32, on transformers' forward, or on specdec's lean forward
    with ``lean_forward``, as the tree drafter needs."""
    target, draft = (copy.deepcopy(_originals()[name]) for name in (TARGET, DRAFT))
    if lean_forward:
        return pair(lean(target), lean(draft, batch_invariant=False),
                    Precision("float32", "tiny random models: the lean forward in float32"))
    return pair(target, draft, Precision("float32", "tiny random models: transformers' float32 forward"))


def load_model(name: str, device: torch.device, precision: Precision, role: str, draft_vocab: int = 0):
    """:func:`specdec.weights.loading.load_model` for the tiny pair's names: (model, tokenizer), the
    weights in ``precision`` on the lean forward (the draft's output layer cut to ``draft_vocab`` ids as
    the real loader cuts it), or for a ``transformers:`` name on transformers' forward with its linear
    layers packed by the real loader's own last step."""
    from specdec.weights.loading import TRANSFORMERS, _finish_transformers, draft_head_rows, lean_options
    tok, original = tokenizer(), _originals()[name.removeprefix(TRANSFORMERS)]
    if name.startswith(TRANSFORMERS):
        return _finish_transformers(copy.deepcopy(original), tok, name, device, precision, role)
    rows = draft_head_rows(tok, draft_vocab) if role == "draft" else None
    return lean(original, precision.name, role == "target", precision.transposed, device.type, precision.kernel,
                head_rows=rows, **lean_options(device, role)), tok


def _variant(name: str | None) -> Precision:
    """The tiny pair's representation: a name's first variant here (:func:`~specdec.model.precision.cpu_variants`'
    order, the kernel preferred at equal speed); ``auto`` is int8's (float32 where there is none), not
    timed: a choice between layers this small would follow the noise, and int8 in specdec's kernels is
    what the real pair's calibration picks and what runs each layer as one call."""
    auto = name in (None, "auto")
    variants = [v for v in cpu_variants() if v.name == ("int8" if auto else name)] or [Precision("float32", "")]
    why = "int8's first kernel here, not timed" if auto else "requested"
    return Precision.from_label(variants[0].label, f"{variants[0].label}: {why} (tiny random models)")


def load_pair(target: str = TARGET, draft: str | None = DRAFT, device: str | None = None, precision: str | None = None,
              draft_vocab: int = 0, draft_precision: str | None = "auto") -> ModelPair:
    """:func:`specdec.weights.loading.load_pair` for the tiny pair's names (see :func:`_variant` for
    ``auto``); a fresh pair each call."""
    dev = torch.device(device or "cpu")
    prec, dprec = _variant(precision), _variant(draft_precision) if draft else None
    target_model, tok = load_model(target, dev, prec, "target")
    draft_model = load_model(draft, dev, dprec, "draft", draft_vocab)[0] if draft else None
    return ModelPair(target_model, tok, draft_model, target, draft, 0, dev, prec, dprec)


def timings() -> dict[str, list[float]]:
    """:func:`specdec.model.precision.cpu_timings` at the tiny verifier's MLP up-projection: the same
    calibration on a layer this size, measured afresh (milliseconds) and never cached."""
    cfg = _originals()[TARGET].config
    return calibration.calibrate(cpu_variants(), CALIBRATION_K, (cfg.intermediate_size, cfg.hidden_size))["timings_ms"]


@dataclass(frozen=True)
class Loaders:
    """Where a benchmark's models and this machine's kernel timings come from, with the signatures of
    :func:`specdec.weights.loading.load_pair`, :func:`~specdec.weights.loading.load_model` and
    :func:`specdec.model.precision.cpu_timings`."""

    load_pair: Callable[..., ModelPair]
    load_model: Callable[..., tuple]
    timings: Callable[[], dict[str, list[float]]]


def loaders(tiny: bool) -> Loaders:
    """specdec's loaders and calibration, or under ``--tiny`` the tiny pair's (above)."""
    if tiny:
        return Loaders(load_pair, load_model, timings)
    from specdec.model.precision import cpu_timings
    from specdec.weights import loading
    return Loaders(loading.load_pair, loading.load_model, cpu_timings)


def prompt_texts(tiny: bool, *groups: list[str]) -> tuple[list[str], ...]:
    """The prompts a script decodes as text, by group: as given, or under ``--tiny`` as many in the
    tiny vocabulary (no chat template: encoded as they are), distinct across groups, each repeating
    its first half so that prompt lookup finds matches."""
    if not tiny:
        return groups
    seeds = iter(range(sum(map(len, groups))))
    return tuple([" ".join(f"w{i}" for i in repeating_prompt(next(seeds))) for _ in group] for group in groups)


def load(args, texts: list[str]) -> tuple[ModelPair, list[tuple[str, list[int]]]]:
    """The pair a benchmark measures and its prompts as (label, token ids): under ``--tiny`` the
    tiny pair and as many random prompts as ``texts``; otherwise the models named by the shared
    model options (``specdec.decode.settings.add_model_arguments``) and ``texts`` through the chat template."""
    if args.tiny:
        return benchmark_pair(), [(f"tiny prompt {i}", repeating_prompt(i)) for i in range(len(texts))]
    from specdec.decode.settings import models_from_args
    real = models_from_args(args).load()
    return real, [(text, real.encode(text)) for text in texts]


def default_out(benchmark: str, env: dict, tiny: bool) -> Path:
    """benchmarks/results/<benchmark>-<cpu slug>.json; a ``--tiny`` run never overwrites a real one."""
    return ROOT / "benchmarks" / "results" / f"{benchmark}{'-tiny' if tiny else ''}-{env['cpu_slug']}.json"
