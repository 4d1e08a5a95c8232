"""The tiny model pair: random Qwen2 models of the real architecture and a word-level tokenizer,
built in-process from configs (no download), in seconds.

The one builder for the tests (``tests/helpers/tiny.py`` reads it from here) and for the
benchmarks' ``--tiny`` mode, where every script then runs end to end and measures nothing but
itself (tests/test_benchmarks.py). ``load`` is where a script picks the tiny pair or the real one
named on its command line."""
from __future__ import annotations

import copy
from pathlib import Path

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from benchmarks.common import ROOT
from specdec.model.precision import Precision
from specdec.weights.pairing import ModelPair

V = 64          # real tokens; the models get padding rows beyond them, Qwen-style
EOS = V - 1


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
         device: str = "cpu", **options):
    """The same weights on specdec's lean Qwen2 forward, in a representation for ``device``;
    ``options`` as :class:`~specdec.model.qwen2.LeanQwen2` takes them (static, pad_rows, graphs, complex_rope)."""
    from specdec.model.qwen2 import LeanQwen2
    make = Precision(precision, "test", transposed).layers(torch.device(device), batch_invariant).build
    out = LeanQwen2(m.config, {k: v.detach().clone() for k, v in m.state_dict().items()}, make,
                    device=device, **options)
    out.generation_config = m.generation_config
    return out


def pair(target, draft=None, precision: Precision | None = None) -> ModelPair:
    """``target`` verified, ``draft`` (if any) drafting, with the word-level tokenizer."""
    return ModelPair(target=target, tokenizer=tokenizer(), draft=draft, target_name="tiny-target",
                     draft_name=None if draft is None else "tiny-draft",
                     **({"precision": precision, "draft_precision": precision} if precision else {}))


def prompt_ids(n: int = 6, seed: int = 0) -> list[int]:
    """``n`` random real token ids (never the EOS), seeded."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, V - 1, (n,), generator=g).tolist()


def repeating_prompt(seed: int, length: int = 12) -> list[int]:
    """Token ids that repeat their first half, so prompt lookup finds matches."""
    half = prompt_ids(length // 2, seed)
    return half + half


def benchmark_pair(seed: int = 0, noise: float = 0.3, lean_forward: bool = False) -> ModelPair:
    """The benchmarks' tiny pair: wider and sharper than the tests' default models, so acceptance
    varies with K and T; on specdec's lean forward (float32) with ``lean_forward``, as the tree
    drafter needs."""
    target = model(seed, hidden=64, scale=4.0, positions=512)
    draft = noisy_copy(target, seed + 1, noise)
    if lean_forward:
        return pair(lean(target), lean(draft, batch_invariant=False),
                    Precision("float32", "tiny random models: the lean forward in float32"))
    return pair(target, draft, Precision("float32", "tiny random models: transformers' float32 forward"))


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
