"""A tiny random verifier and draft, built in-process from configs (no download), for the
benchmarks' ``--tiny`` mode: every script then runs end to end in seconds, which is how the tests
drive them (tests/test_benchmarks.py). The numbers it produces measure nothing but the scripts.
``load`` is where a script picks the tiny pair or the real one named on its command line."""
from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from benchmarks.common import ROOT
from specdec.model.precision import Precision
from specdec.weights.pairing import ModelPair

V = 64          # real tokens; the models get 8 padding rows beyond them, Qwen-style
EOS = V - 1


def _model(seed: int, hidden: int = 64, layers: int = 2, scale: float = 4.0) -> Qwen2ForCausalLM:
    torch.manual_seed(seed)
    cfg = Qwen2Config(vocab_size=V + 8, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      eos_token_id=EOS, tie_word_embeddings=False)
    m = Qwen2ForCausalLM(cfg).eval()
    with torch.no_grad():
        m.lm_head.weight.mul_(scale)  # sharper distributions, so acceptance varies with K and T
        m.lm_head.weight[V:] = 0      # padding rows carry no real token
    return m


def _noisy_copy(m: Qwen2ForCausalLM, seed: int, noise: float) -> Qwen2ForCausalLM:
    """A draft that agrees with ``m`` often but not always, like a real small sibling model."""
    d = Qwen2ForCausalLM(m.config).eval()
    d.load_state_dict(m.state_dict())
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for w in d.parameters():
            w.add_(noise * w.std() * torch.randn(w.shape, generator=g))
    return d


def _tokenizer() -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.WordLevel({f"w{i}": i for i in range(V - 1)} | {"<eos>": EOS}, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", unk_token="w0")


def pair(seed: int = 0, noise: float = 0.3) -> ModelPair:
    target = _model(seed)
    return ModelPair(target=target, tokenizer=_tokenizer(), draft=_noisy_copy(target, seed + 1, noise),
                     target_name="tiny-random-target", draft_name="tiny-random-draft",
                     precision=Precision("float32", "tiny random models: transformers' float32 forward"))


def _prompt(i: int, length: int = 12) -> list[int]:
    """Token ids that repeat their first half, so prompt lookup finds matches."""
    half = torch.randint(0, EOS, (length // 2,), generator=torch.Generator().manual_seed(i)).tolist()
    return half + half


def load(args, texts: list[str]) -> tuple[ModelPair, list[tuple[str, list[int]]]]:
    """The pair a benchmark measures and its prompts as (label, token ids): under ``--tiny`` the
    tiny pair and as many random prompts as ``texts``; otherwise the models named by the shared
    model options (``specdec.decode.settings.add_model_arguments``) and ``texts`` through the chat template."""
    if args.tiny:
        return pair(), [(f"tiny prompt {i}", _prompt(i)) for i in range(len(texts))]
    from specdec.decode.settings import models_from_args
    real = models_from_args(args).load()
    return real, [(text, real.encode(text)) for text in texts]


def default_out(benchmark: str, env: dict, tiny: bool) -> Path:
    """benchmarks/results/<benchmark>-<cpu slug>.json; a ``--tiny`` run never overwrites a real one."""
    return ROOT / "benchmarks" / "results" / f"{benchmark}{'-tiny' if tiny else ''}-{env['cpu_slug']}.json"


def lean_pair(seed: int = 0, noise: float = 0.3) -> ModelPair:
    """The tiny pair on specdec's lean Qwen2 forward (float32), as the tree drafter needs."""
    from specdec.model.qwen2 import LeanQwen2
    base = pair(seed, noise)
    prec = base.precision

    def lean(m, invariant: bool):
        out = LeanQwen2(m.config, {k: v.detach().clone() for k, v in m.state_dict().items()},
                        prec.layers(torch.device("cpu"), invariant).build)
        out.generation_config = m.generation_config
        return out
    return ModelPair(target=lean(base.target, True), tokenizer=base.tokenizer, draft=lean(base.draft, False),
                     target_name=base.target_name, draft_name=base.draft_name, precision=prec,
                     draft_precision=prec)
