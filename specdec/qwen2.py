"""A lean Qwen2 forward for batch 1, with a KV cache that grows in place and rolls back by length.

The embedded pair is Qwen2 (Qwen2.5-Coder). On a 2-core CPU transformers' eager forward spends
about as long in per-op work around the matmuls (mask building, cache bookkeeping, module hooks,
three separate q/k/v and two gate/up matmuls) as in the matmuls themselves, and for the small
draft model that overhead is most of the cost. This module is the same maths as transformers'
``Qwen2ForCausalLM`` (RMSNorm, rotate-half RoPE, grouped-query attention, SiLU-gated MLP) in
about a dozen ops per layer: q/k/v fused into one matmul and gate/up into another (the same
numbers as separate ones: each output column is its own dot product), attention by
``scaled_dot_product_attention``, and RoPE as one complex multiply: the q and k projection rows
are reordered at load so that each rotated pair (i, i + D/2) sits side by side, which leaves
every attention score unchanged (q and k get the same permutation) and turns rotate-half's five
ops into one. ``tests/test_qwen2.py`` checks its logits against transformers'.

**Batch invariance.** A row's logits do not depend on how many rows share its forward: the
int8 layers use exact integer accumulation with per-row scales, RoPE angles come from one table,
and attention for a verification (up to ``EXACT_ROWS`` rows) runs row by row over exactly the keys
that row sees, the same call a 1-token forward makes. So the verifier's K+1-row forward gives
the same numbers as K+1 one-token forwards, and greedy speculative output equals greedy
verifier-only output token for token, not just up to near-ties. (A fused masked attention over
all rows sums in a different order; with int8 activations such rounding differences can move
an activation across a quantisation step and flip a later argmax.)

**Token trees** (SpecInfer, Miao et al. 2023, Section 4): a forward may take T rows that form a
tree rather than a chain (:class:`TreeAttention`): each row has its own position (its depth)
and attends to exactly the cached context plus its own ancestors. With ``exact`` (the
verifier's trees) each row's keys are gathered into one contiguous tensor and attended to by the same
call a one-token forward at the end of that path makes, so a node's logits are bitwise those of a
chain forward along its path; otherwise (the draft, which needs no invariance) one fused
masked attention serves all rows.

The KV cache keeps one tensor per layer with room to spare; rolling back is setting a length
(``crop``), so the engine's one cache invariant holds exactly as with ``DynamicCache``. After a
tree round, ``compact`` moves the accepted path's entries into place first.

Shapes: T new tokens, L cached tokens, H query heads, G key/value heads, D head size,
E hidden size, I intermediate size, V vocabulary rows.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from .kernels import PackedLinear

EXACT_ROWS = 33  # up to K+1 for the largest K: verification forwards attend row by row
MakeLinear = Callable[[torch.Tensor, "torch.Tensor | None"], PackedLinear]  # (weight, bias) -> layer


@dataclass(frozen=True)
class Qwen2Shape:
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    eps: float
    rope_theta: float

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @classmethod
    def from_config(cls, c) -> Qwen2Shape:
        theta = (getattr(c, "rope_parameters", None) or {}).get("rope_theta", getattr(c, "rope_theta", 10000.0))
        return cls(c.hidden_size, c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads,
                   c.intermediate_size, c.vocab_size, c.rms_norm_eps, float(theta))


def supports(config) -> bool:
    """The configs this forward reproduces exactly: plain Qwen2, full attention, default RoPE."""
    rope = (getattr(config, "rope_parameters", None) or {}).get("rope_type", "default")
    return (getattr(config, "model_type", None) == "qwen2" and rope == "default"
            and not getattr(config, "use_sliding_window", False) and config.hidden_act == "silu")


@dataclass(frozen=True)
class TreeAttention:
    """Where each of T new rows sits and what it sees: a token tree over a cache of L entries."""

    positions: torch.Tensor              # (T,) absolute positions, for RoPE
    keys: tuple[torch.Tensor | int, ...]  # per row, ascending cache indices it attends to (itself last),
                                          # or n for the first n entries (a view, no copy)
    exact: bool = True                   # row by row (batch-invariant) rather than one fused masked call

    def mask(self, total: int) -> torch.Tensor:
        """(T, total) bool: row t may attend to cache entry j."""
        m = torch.zeros(len(self.keys), total, dtype=torch.bool)
        for t, idx in enumerate(self.keys):
            m[t, slice(idx) if isinstance(idx, int) else idx] = True
        return m


class KVCache:
    """Per layer one (G, capacity, D) key and value tensor; ``length`` tokens of it are valid."""

    def __init__(self, shape: Qwen2Shape, dtype: torch.dtype, capacity: int = 512):
        self.shape, self.dtype, self.length = shape, dtype, 0
        self.k = [torch.empty(shape.kv_heads, capacity, shape.head_dim, dtype=dtype) for _ in range(shape.layers)]
        self.v = [torch.empty_like(t) for t in self.k]

    def reserve(self, n: int) -> None:
        cap = self.k[0].shape[1]
        if n <= cap:
            return
        new = max(n, 2 * cap)  # doubling: amortised O(1) per token
        for kv in (self.k, self.v):
            for i, t in enumerate(kv):
                grown = torch.empty(t.shape[0], new, t.shape[2], dtype=t.dtype)
                grown[:, : self.length] = t[:, : self.length]
                kv[i] = grown

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
        for kv in (self.k, self.v):
            for t in kv:
                t[:, start:n] = t[:, sources]  # advanced indexing copies first, so overlaps are safe
        self.length = n


class Qwen2Layer(torch.nn.Module):
    def __init__(self, shape: Qwen2Shape, w: dict[str, torch.Tensor], make: MakeLinear, prefix: str):
        super().__init__()
        self.shape = shape
        H, G = shape.heads, shape.kv_heads
        a, m = f"{prefix}self_attn.", f"{prefix}mlp."
        self.attn_norm = w[f"{prefix}input_layernorm.weight"].float()
        self.mlp_norm = w[f"{prefix}post_attention_layernorm.weight"].float()
        pairs = {"q": H, "k": G}  # heads whose rows are reordered for the complex RoPE
        self.qkv = make(torch.cat([_pairwise(w[f"{a}{n}_proj.weight"], pairs.get(n)) for n in "qkv"]),
                        torch.cat([_pairwise(w[f"{a}{n}_proj.bias"], pairs.get(n)) for n in "qkv"]))  # (H*D+2*G*D, E)
        self.o = make(w[f"{a}o_proj.weight"], None)
        self.gate_up = make(torch.cat([w[f"{m}gate_proj.weight"], w[f"{m}up_proj.weight"]]), None)
        self.down = make(w[f"{m}down_proj.weight"], None)

    def forward(self, x: torch.Tensor, rot: torch.Tensor, cache: KVCache, i: int,
                mask: torch.Tensor | None, rows: tuple[torch.Tensor, ...] | None = None,
                fused: bool = False) -> torch.Tensor:
        s, (T, _), L = self.shape, x.shape, cache.length
        H, G, D = s.heads, s.kv_heads, s.head_dim
        qkv = self.qkv(F.rms_norm(x, (s.hidden,), self.attn_norm, s.eps))    # (T, H*D + 2*G*D)
        qk = _rope(qkv[:, : (H + G) * D], rot, H + G)                        # (T, H+G, D): q and k in one multiply
        q = qk[:, :H].transpose(0, 1)                                        # (H, T, D)
        cache.k[i][:, L:L + T] = qk[:, H:].transpose(0, 1)
        cache.v[i][:, L:L + T] = qkv[:, (H + G) * D:].view(T, G, D).transpose(0, 1)
        keys, values = cache.k[i][:, : L + T], cache.v[i][:, : L + T]      # (G, L+T, D)
        if rows is not None:  # a tree, exactly: each row over its own keys, gathered contiguous
            att = torch.cat([F.scaled_dot_product_attention(q[None, :, t:t + 1], *_keys(cache, i, idx), enable_gqa=True)
                             for t, idx in enumerate(rows)], dim=2)                     # (1, H, T, D)
        elif fused or mask is None or T > EXACT_ROWS:
            att = F.scaled_dot_product_attention(q[None], keys[None], values[None], attn_mask=mask,
                                                 enable_gqa=True)                       # (1, H, T, D)
        else:  # row t sees L+t+1 keys: the very call a one-token forward at that position makes
            att = torch.cat([F.scaled_dot_product_attention(q[None, :, t:t + 1], keys[None, :, : L + t + 1],
                                                            values[None, :, : L + t + 1], enable_gqa=True)
                             for t in range(T)], dim=2)                                 # (1, H, T, D)
        x = x + self.o(att[0].transpose(0, 1).reshape(T, H * D))
        gate, up = self.gate_up(F.rms_norm(x, (s.hidden,), self.mlp_norm, s.eps)).chunk(2, -1)  # (T, I) each
        return x + self.down(F.silu(gate) * up)


def _keys(cache: KVCache, i: int, idx: torch.Tensor | int) -> tuple[torch.Tensor, torch.Tensor]:
    """(1, G, n, D) keys and values of layer i a tree row sees: a prefix view, or a gathered copy."""
    if isinstance(idx, int):
        return cache.k[i][None, :, :idx], cache.v[i][None, :, :idx]
    return cache.k[i][None, :, idx], cache.v[i][None, :, idx]


def _pairwise(w: torch.Tensor, heads: int | None) -> torch.Tensor:
    """Reorder each head's rows (or bias entries) from [0..D/2, D/2..D] to pairs (i, i + D/2)."""
    if heads is None:
        return w
    rest = w.shape[1:]
    return w.reshape(heads, 2, -1, *rest).transpose(1, 2).reshape(w.shape)


def _rope(x: torch.Tensor, rot: torch.Tensor, heads: int) -> torch.Tensor:
    """(T, heads*D) with pairs side by side, rotated by e^{i * angle}: (T, heads, D)."""
    T = x.shape[0]
    pairs = torch.view_as_complex(x.reshape(T, heads, -1, 2))                 # (T, heads, D/2)
    return torch.view_as_real(pairs * rot[:, None]).reshape(T, heads, -1)


class LeanQwen2(torch.nn.Module):
    """Logits of the last ``keep`` of T new tokens, given a :class:`KVCache` of the earlier ones."""

    def __init__(self, config, weights: dict[str, torch.Tensor], make: MakeLinear,
                 embed_dtype: torch.dtype = torch.float32, head_rows: torch.Tensor | None = None):
        super().__init__()
        self.config, self.shape = config, Qwen2Shape.from_config(config)
        s = self.shape
        self.embed = weights["model.embed_tokens.weight"].to(embed_dtype)                # (V, E)
        self.layers = torch.nn.ModuleList(
            Qwen2Layer(s, weights, make, f"model.layers.{i}.") for i in range(s.layers))
        self.norm = weights["model.norm.weight"].float()
        head = weights["lm_head.weight" if "lm_head.weight" in weights else "model.embed_tokens.weight"]  # tied
        self.rows = head.shape[0]
        # A draft may score only some tokens (``head_rows``, sorted ids): the others get logit -inf,
        # so q(x) = 0 there and the draft never proposes them. q is still exactly the distribution
        # it samples from, so the rule stays lossless; only acceptance can change.
        self.head_rows = head_rows
        self.head = make(head if head_rows is None else head[head_rows], None)
        self.inv_freq = 1.0 / s.rope_theta ** (torch.arange(0, s.head_dim, 2, dtype=torch.float32) / s.head_dim)
        self._rope_table(1024)

    def _rope_table(self, n: int) -> None:
        """e^{i * angle} for positions 0..n-1, recomputed whole when it must grow (doubling), so a
        position's angle never depends on which forward asked for it."""
        freqs = torch.outer(torch.arange(n, dtype=torch.float32), self.inv_freq)     # (n, D/2)
        self.rot = torch.polar(torch.ones_like(freqs), freqs)                         # (n, D/2) complex

    def new_cache(self) -> KVCache:
        return KVCache(self.shape, torch.float32)

    def num_parameters(self) -> int:
        s = self.shape
        per_layer = (s.hidden * (s.heads + 2 * s.kv_heads) * s.head_dim + (s.heads + 2 * s.kv_heads) * s.head_dim
                     + s.heads * s.head_dim * s.hidden + 3 * s.hidden * s.intermediate + 2 * s.hidden)
        return s.layers * per_layer + 2 * s.vocab * s.hidden + s.hidden

    def output_rows(self) -> int:
        return self.rows

    @torch.inference_mode()
    def forward(self, ids: torch.Tensor, cache: KVCache, keep: int, tree: TreeAttention | None = None
                ) -> torch.Tensor:
        T, L = ids.shape[0], cache.length
        cache.reserve(L + T)
        top = L + T if tree is None else int(tree.positions.max()) + 1
        if top > self.rot.shape[0]:
            self._rope_table(max(top, 2 * self.rot.shape[0]))
        rows = None
        if tree is None:
            rot = self.rot[L:L + T]                                                      # (T, D/2)
            # Causal within the new tokens; all cached tokens are visible. One new token needs no mask.
            mask = None if T == 1 else torch.ones(T, L + T, dtype=torch.bool).tril(L)   # (T, L+T)
        else:
            rot = self.rot[tree.positions]                                               # (T, D/2)
            mask = None if tree.exact else tree.mask(L + T)                              # (T, L+T)
            rows = tree.keys if tree.exact else None
        x = self.embed[ids].float()                                                      # (T, E)
        for i, layer in enumerate(self.layers):
            x = layer(x, rot, cache, i, mask, rows, fused=tree is not None)
        cache.length = L + T
        x = F.rms_norm(x[-keep:], (self.shape.hidden,), self.norm, self.shape.eps)
        if self.head_rows is None:
            return self.head(x)                                                          # (keep, V)
        logits = x.new_full((keep, self.rows), float("-inf"))                            # (keep, V)
        logits[:, self.head_rows] = self.head(x)
        return logits
