"""The lean forward's KV cache: one tensor per layer with room to spare, grown by doubling.

Rolling back is setting a length (``crop``), so the engine's one cache invariant (after a round,
each cache holds exactly the context) holds as with transformers' ``DynamicCache``. After a tree
round, ``compact`` moves the accepted path's entries into place first. Shapes: G key/value
heads, D head size.
"""
from __future__ import annotations

import torch


class KVCache:
    """Per layer one (G, capacity, D) key and value tensor; ``length`` tokens of it are valid.

    ``static``: zero-filled (a masked-out entry must be a number: 0 x NaN would be NaN) and read
    whole by every forward; it grows only between forwards, and then its captured graphs
    (``graphs``, keyed by row count) are dropped, since they point at the old tensors."""

    def __init__(self, layers: int, kv_heads: int, head_dim: int, dtype: torch.dtype, capacity: int = 512,
                 device: torch.device | str = "cpu", static: bool = False):
        self.dtype, self.length, self.static = dtype, 0, static
        self.device = torch.device(device)
        new = torch.zeros if static else torch.empty
        self.k = [new(kv_heads, capacity, head_dim, dtype=dtype, device=self.device) for _ in range(layers)]
        self.v = [new(t.shape, dtype=dtype, device=self.device) for t in self.k]
        self.graphs: dict = {}

    @property
    def capacity(self) -> int:
        return self.k[0].shape[1]

    def reserve(self, n: int) -> None:
        cap = self.capacity
        if n <= cap:
            return
        new = max(n, 2 * cap)  # doubling: amortised O(1) per token
        alloc = torch.zeros if self.static else torch.empty
        for kv in (self.k, self.v):
            for i, t in enumerate(kv):
                grown = alloc(t.shape[0], new, t.shape[2], dtype=t.dtype, device=t.device)
                grown[:, : self.length] = t[:, : self.length]
                kv[i] = grown
        self.graphs.clear()

    def get_seq_length(self) -> int:
        return self.length

    def crop(self, max_length: int) -> None:
        """As ``DynamicCache.crop``: keep ``max_length`` tokens, or drop ``-max_length`` if negative."""
        n = self.length + max_length if max_length < 0 else max_length
        if not 0 <= n <= self.length:
            raise ValueError(f"cannot crop a cache of {self.length} tokens to {n}")
        self.length = n

    def compact(self, start: int, sources: torch.Tensor) -> None:
        """Keep the entries at ``sources`` (ascending, all >= start) at start, start+1, ... and
        drop everything after them: a tree round keeps only its accepted path."""
        n = start + len(sources)
        if len(sources) and not (int(sources[0]) >= start and int(sources[-1]) < self.length):
            raise ValueError(f"cannot keep entries {sources.tolist()} of a cache of {self.length} from {start}")
        sources = sources.to(self.device)
        for kv in (self.k, self.v):
            for t in kv:
                t[:, start:n] = t[:, sources]  # advanced indexing copies first, so overlaps are safe
        self.length = n
