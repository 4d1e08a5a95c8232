"""Pairing a verifier with a draft: :class:`ModelPair`, the checks that they can share token ids
and roll back, the chat template's encoding and the stop ids.

A pair is checked when it is made, never at its first round: the tokenizers must agree on every
shared id, and each model's KV cache must be able to roll back (the engine crops it every round).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field

import torch

from specdec.model import qwen2
from specdec.model.kernels import PackedLinear
from specdec.model.precision import Precision
from specdec.options import ConfigError, validate_prompt
from specdec.weights.errors import ModelLoadError


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
