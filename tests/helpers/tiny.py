"""Tiny randomly initialised models and a word-level tokenizer, built offline from configs."""
from __future__ import annotations

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from specdec.weights.pairing import ModelPair

V = 64          # real tokens; the models get padding rows beyond them, Qwen-style
EOS = V - 1


def tokenizer(vocab: int = V) -> PreTrainedTokenizerFast:
    words = {f"w{i}": i for i in range(vocab - 1)} | {"<eos>": vocab - 1}
    tok = Tokenizer(models.WordLevel(words, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", unk_token="w0")
    return fast


def model(seed: int, rows: int = V + 8, layers: int = 2, hidden: int = 32, scale: float = 1.0) -> Qwen2ForCausalLM:
    torch.manual_seed(seed)
    cfg = Qwen2Config(vocab_size=rows, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                      eos_token_id=EOS, tie_word_embeddings=False)
    m = Qwen2ForCausalLM(cfg).eval()
    with torch.no_grad():
        m.lm_head.weight.mul_(scale)  # sharper distributions: larger scale, fewer near-ties
        m.lm_head.weight[V:] = 0      # padding rows carry no real token
    return m


def pair(target, draft=None) -> ModelPair:
    return ModelPair(target=target, tokenizer=tokenizer(), draft=draft, target_name="tiny-target",
                     draft_name=None if draft is None else "tiny-draft")


def prompt_ids(n: int = 6, seed: int = 0) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, V - 1, (n,), generator=g).tolist()


def noisy_copy(m: Qwen2ForCausalLM, seed: int, noise: float) -> Qwen2ForCausalLM:
    """A draft that agrees with ``m`` often but not always, like a real small sibling model."""
    import copy
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
    from specdec.model.precision import Precision
    from specdec.model.qwen2 import LeanQwen2
    make = Precision(precision, "test", transposed).layers(torch.device(device), batch_invariant).build
    out = LeanQwen2(m.config, {k: v.detach().clone() for k, v in m.state_dict().items()}, make,
                    device=device, **options)
    out.generation_config = m.generation_config
    return out


def verification_and_single_rows(lean, ids: list[int], cached: int = 8):
    """The logits of ``ids[cached:]`` from one forward of all of them, and from one forward each,
    after the same ``cached`` tokens: equal exactly when the forward is batch-invariant."""
    from specdec.model.lm import CachedLM
    a, b = CachedLM(lean, V), CachedLM(lean, V)
    a.forward(ids[:cached], keep=1)
    b.forward(ids[:cached], keep=1)
    together = a.forward(ids[cached:], keep=len(ids) - cached)
    return together, torch.cat([b.forward([t], keep=1) for t in ids[cached:]])
