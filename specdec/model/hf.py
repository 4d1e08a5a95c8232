"""A transformers causal LM behind the lean forward's interface, so that :class:`~specdec.model.lm.CachedLM`
drives either model the same way.

The interface (:class:`~specdec.model.qwen2.LeanQwen2`'s): ``device``; ``new_cache()``, a KV cache
with ``get_seq_length()`` and ``crop(n)``; and ``model(ids, cache, keep)``: append the (T,) ``ids``
to the cache and return the logits of the last ``keep`` of them, (keep, V'), V' the output layer's
rows (the shared vocabulary and any padding after it). transformers' model has no tree attention
and no cache that keeps a path, so a token tree is refused here.
"""
from __future__ import annotations

import torch
from transformers import DynamicCache


class HFForward:
    """A transformers model (``PreTrainedModel`` with a causal LM head) with the lean forward's interface."""

    def __init__(self, model):
        self.model = model
        self.device = next(model.parameters()).device

    def new_cache(self) -> DynamicCache:
        """A cache that can be rolled back (``crop``), or TypeError: sliding-window and recurrent layers
        cannot drop entries, so such a model cannot take part in speculative decoding."""
        cache = DynamicCache(config=self.model.config)
        if not cache.is_croppable:
            raise TypeError(f"{type(self.model).__name__}: its KV cache cannot be rolled back "
                            "(sliding-window or recurrent layers), so it cannot take part in speculative decoding")
        return cache

    def __call__(self, ids: torch.Tensor, cache: DynamicCache, keep: int, tree=None) -> torch.Tensor:
        if tree is not None:
            raise TypeError("token trees need the lean Qwen2 forward (its cache keeps tree entries in place)")
        x = ids[None].to(self.device, non_blocking=True)                              # (1, T), no host sync
        return self.model(input_ids=x, cache=cache, use_cache=True, logits_to_keep=keep).logits[0, -keep:]  # (keep, V')
