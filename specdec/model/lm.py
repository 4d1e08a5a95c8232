"""A causal LM together with its KV cache, and the one cache invariant of the engine.

Invariant (checked in :meth:`CachedLM.rollback`, the only place a cache shrinks): after every
round each cache holds a *prefix of the context (prompt and emitted tokens) that stops before
its last token*. The verifier's holds exactly the whole context but the last token; the draft's may be one shorter after
an all-accepted round (it never fed its own K-th token) and catches up in its next forward.
So the last context token is always the first input of the next round, and no forward pass is
spent "re-preparing" logits.

A tree round (:mod:`specdec.decode.tree`) appends a whole token tree; before the rollback,
:meth:`CachedLM.keep` moves the accepted path's entries into place, after which the same
invariant holds. Only the lean forward's cache can do that; the tree drafter refuses other models.

Rollback goes through the cache API (``crop``, of the lean Qwen2 forward's
:class:`~specdec.model.kvcache.KVCache` or of transformers' ``DynamicCache``), never by slicing
per-layer tensors; a cache that cannot be cropped is refused when the pair is loaded
(:func:`specdec.weights.pairing.check_rollback`).
"""
from __future__ import annotations

import torch

from specdec.model.qwen2 import LeanQwen2, TreeAttention

PREFILL_CHUNK = 256  # tokens per prefill forward: a long prompt stays cancellable


class CachedLM:
    """One model and its KV cache for one run: what the engine and the drafters call a model.

    ``forward`` appends tokens and returns the logits of the last ones, cut to the shared
    vocabulary V; ``rollback`` restores the invariant above; ``keep`` moves a tree round's
    accepted path into place. ``model`` is the lean Qwen2 forward, or a transformers model, which
    is put behind :class:`~specdec.model.hf.HFForward` (the lean forward's interface) here."""

    def __init__(self, model, vocab_size: int):
        if not isinstance(model, LeanQwen2):  # transformers is imported only for a transformers model
            from specdec.model.hf import HFForward
            model = HFForward(model)
        self.model = model
        self.vocab_size = vocab_size  # shared vocabulary V: padding rows beyond it are sliced off
        self.device, self.cache = model.device, model.new_cache()

    def __len__(self) -> int:
        return self.cache.get_seq_length()

    @torch.inference_mode()
    def forward(self, ids: list[int], keep: int) -> torch.Tensor:
        """Append ``ids`` (T,) to the cache; return the logits of the last ``keep`` of them, (keep, V)."""
        return self.model(torch.tensor(ids, dtype=torch.long), self.cache, keep)[:, : self.vocab_size]

    @torch.inference_mode()
    def forward_tree(self, ids: list[int], tree: TreeAttention) -> torch.Tensor:
        """Append a token tree (T rows, positions and visible entries in ``tree``); (T, V) logits."""
        return self.model(torch.tensor(ids, dtype=torch.long), self.cache, len(ids), tree)[:, : self.vocab_size]

    def keep(self, start: int, sources: list[int]) -> None:
        """Keep the entries at ``sources`` (ascending) right after the first ``start``, drop the rest."""
        self.cache.compact(start, torch.tensor(sources, dtype=torch.long))

    def prefill(self, ids: list[int], cancelled=lambda: False) -> bool:
        """Feed tokens whose logits nobody needs (the prompt but its last token), in chunks of
        ``PREFILL_CHUNK`` so that a long prompt can be cancelled between two; False if it was."""
        for i in range(0, len(ids), PREFILL_CHUNK):
            if cancelled():
                return False
            self.forward(ids[i:i + PREFILL_CHUNK], keep=1)
        return True

    def rollback(self, context: list[int]) -> None:
        """Crop to the longest valid prefix: at most the whole context but its last token."""
        excess = len(self) - (len(context) - 1)
        if excess > 0:
            self.cache.crop(-excess)  # transformers 5: a negative count removes that many tokens
        if len(self) > len(context) - 1:
            raise RuntimeError(f"KV cache rollback failed: {len(self)} entries for a context of {len(context)}")

