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
ops into one. ``tests/model/test_qwen2.py`` checks its logits against transformers'.

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

**One call per layer.** Where every linear is one of specdec's own kernels (the CPU's int8 and int4)
and its attention op runs here, each layer is one C++ call (``decoder_layer``: the norm, q/k/v,
RoPE, the cache write, attention, o, the MLP and both residuals), the same steps in the same order,
bitwise what the op-by-op path gives (``tests/model/test_native.py``): what it removes is the
Python and the ~20 torch ops around the kernels, which a small draft pays 24 times a token.

The KV cache (:mod:`specdec.model.kvcache`) rolls back by setting a length.

**One forward for every device.** The same module runs on CUDA and Apple MPS, its weights,
cache, RoPE table and attention on the device (:mod:`specdec.model.devices`). MPS lacks parts of
complex-number support, so there RoPE rotates each pair as two real halves (``complex_rope``
False: the same products, no complex dtype). On a GPU the cache is **static** (``static``):
zero-filled, of a fixed capacity, every forward writes its rows at their slots and attends with
one masked call over the whole capacity, so a forward of T rows has one shape whatever the
context length, which is what lets :mod:`specdec.model.graphs` capture it as a CUDA graph. A GPU's
GEMMs are not batch-invariant (another row count can pick another kernel and sum in another
order), so the verifier's forwards are **padded** to one row count (``pad_rows``): verifier-only
decoding and a K+1-row verification then run the very same kernels, and each row's numbers
depend on that row alone. The CPU keeps the dynamic cache and exact row-by-row attention above;
the static path runs on the CPU too (``tests/model/test_devices.py`` checks it there in float32).

Shapes: T new tokens, L cached tokens, H query heads, G key/value heads, D head size,
E hidden size, I intermediate size, V vocabulary rows.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from specdec.model import native
from specdec.model.kernels import PackedLinear
from specdec.model.kvcache import KVCache

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


class Qwen2Layer(torch.nn.Module):
    PARTS = ("qkv", "o", "gate_up", "down")

    def __init__(self, shape: Qwen2Shape, attn_norm: torch.Tensor, mlp_norm: torch.Tensor, qkv: PackedLinear,
                 o: PackedLinear, gate_up: PackedLinear, down: PackedLinear):
        super().__init__()
        self.shape, self.attn_norm, self.mlp_norm = shape, attn_norm, mlp_norm
        self.qkv, self.o, self.gate_up, self.down = qkv, o, gate_up, down

    @classmethod
    def from_weights(cls, shape: Qwen2Shape, w, make: MakeLinear, prefix: str,
                     device: torch.device = torch.device("cpu")) -> Qwen2Layer:
        """From transformers' weights: q/k/v fused into one layer, gate/up into another."""
        H, G = shape.heads, shape.kv_heads
        a, m = f"{prefix}self_attn.", f"{prefix}mlp."
        pairs = dict(q=H, k=G)  # heads whose rows are reordered for the complex RoPE
        qkv = make(torch.cat([_pairwise(w[f"{a}{n}_proj.weight"], pairs.get(n)) for n in "qkv"]),
                   torch.cat([_pairwise(w[f"{a}{n}_proj.bias"], pairs.get(n)) for n in "qkv"]))  # (H*D+2*G*D, E)
        o = make(w[f"{a}o_proj.weight"], None)
        gate_up = make(torch.cat([w[f"{m}gate_proj.weight"], w[f"{m}up_proj.weight"]]), None)
        down = make(w[f"{m}down_proj.weight"], None)
        return cls(shape, w[f"{prefix}input_layernorm.weight"].float().to(device),
                   w[f"{prefix}post_attention_layernorm.weight"].float().to(device), qkv, o, gate_up, down)

    def forward(self, x: torch.Tensor, rot: torch.Tensor, cache: KVCache, i: int,
                mask: torch.Tensor | None, rows: tuple[torch.Tensor, ...] | None = None,
                fused: bool = False, slots: torch.Tensor | None = None,
                seen: tuple[torch.Tensor, torch.Tensor | None] | None = None) -> torch.Tensor:
        s, (T, _), L = self.shape, x.shape, cache.length
        H, G, D = s.heads, s.kv_heads, s.head_dim
        qkv = self.qkv.fused(x, norm=(self.attn_norm, s.eps))                 # (T, H*D + 2*G*D)
        qk = _rope(qkv[:, : (H + G) * D], rot, H + G)                        # (T, H+G, D): q and k in one multiply
        q = qk[:, :H].transpose(0, 1)                                        # (H, T, D)
        if slots is not None:  # static: rows written at their slots, one masked call over the whole capacity
            cache.k[i].index_copy_(1, slots, qk[:, H:].transpose(0, 1))
            cache.v[i].index_copy_(1, slots, qkv[:, (H + G) * D:].view(T, G, D).transpose(0, 1))
            att = F.scaled_dot_product_attention(q[None], cache.k[i][None], cache.v[i][None], attn_mask=mask,
                                                 enable_gqa=True)                       # (1, H, T, D)
            return self._rest(x, att)
        cache.k[i][:, L:L + T] = qk[:, H:].transpose(0, 1)
        cache.v[i][:, L:L + T] = qkv[:, (H + G) * D:].view(T, G, D).transpose(0, 1)
        if seen is not None:  # specdec's attention: every row over exactly its keys, in one call
            return self._rest(x, native.ops().attention(qk[:, :H].contiguous(), cache.k[i], cache.v[i], *seen))
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
        return self._rest(x, att)

    def one_call(self) -> tuple | None:
        """The weights' arguments of specdec's ``decoder_layer`` op (the whole layer in one call), or
        None where a linear is not one of specdec's kernels (another precision, a GPU) or the layer's
        shape is one the op does not take."""
        if not hasattr(self, "_one_call"):
            parts = [self.qkv, self.o, self.gate_up, self.down]
            ok = (all(isinstance(p, native.Native) for p in parts) and len({p.isa for p in parts}) == 1
                  and all(p.bias is None for p in parts[1:]))
            qkv, *rest = parts
            self._one_call = None if not ok else (qkv.isa, [p.out_features for p in parts], *qkv.weights(), qkv.bias,
                                                  *(t for p in rest for t in p.weights()))
        return self._one_call

    def _rest(self, x: torch.Tensor, att: torch.Tensor) -> torch.Tensor:
        """The output projection and the MLP, each with its residual: (T, E). ``att`` is
        (1, H, T, D), or already (T, H*D)."""
        s, T = self.shape, x.shape[0]
        if att.dim() == 4:
            att = att[0].transpose(0, 1).reshape(T, s.heads * s.head_dim)
        x = self.o.fused(att, residual=x)
        gate_up = self.gate_up.fused(x, norm=(self.mlp_norm, s.eps))                     # (T, 2I): gate, up
        return self.down.fused(gate_up, gated=True, residual=x)                          # silu(gate) * up


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
    """(T, heads*D) with pairs side by side, rotated by e^{i * angle}: (T, heads, D). ``rot`` is
    (T, D/2) complex, or (T, D/2, 2) real (cos, sin) where the device lacks complex numbers: the
    same four products and two sums, (a cos - b sin, a sin + b cos)."""
    T = x.shape[0]
    if rot.is_complex():
        pairs = torch.view_as_complex(x.reshape(T, heads, -1, 2))             # (T, heads, D/2)
        return torch.view_as_real(pairs * rot[:, None]).reshape(T, heads, -1)
    a, b = x.reshape(T, heads, -1, 2).unbind(-1)                              # (T, heads, D/2) each
    cos, sin = rot[:, None, :, 0], rot[:, None, :, 1]                         # (T, 1, D/2) each
    return torch.stack([a * cos - b * sin, a * sin + b * cos], -1).reshape(T, heads, -1)


class LeanQwen2(torch.nn.Module):
    """Logits of the last ``keep`` of T new tokens, given a :class:`KVCache` of the earlier ones.

    ``device``: where weights, cache and compute live (``make`` builds each linear there).
    ``static``: static caches and one masked attention call (a GPU's way; see the module
    docstring); ``pad_rows``: every forward of fewer rows is padded to this many (the verifier on
    a GPU, for batch invariance; 0: none); ``graphs``: replay each forward of up to
    ``GRAPH_ROWS`` rows as a CUDA graph captured per row count (:mod:`specdec.model.graphs`).
    """

    def __init__(self, config, weights, make: MakeLinear | None,
                 embed_dtype: torch.dtype = torch.float32, head_rows: torch.Tensor | None = None,
                 device: torch.device | str = "cpu", static: bool = False, pad_rows: int = 0,
                 graphs: bool = False, complex_rope: bool | None = None,
                 restore: Callable[[dict, "torch.Tensor | None"], PackedLinear] | None = None):
        """``weights``: transformers' names, each layer built by ``make``; or, with ``restore``
        (state, bias) -> layer, a :meth:`packed_state` as saved, each layer rebuilt as it was."""
        super().__init__()
        self.config, self.shape = config, Qwen2Shape.from_config(config)
        s = self.shape
        self.device = torch.device(device)
        self.static, self.pad_rows, self.graphs = static, pad_rows, graphs
        self.one_call_layers = True
        # MPS has no complex multiply: there RoPE takes (cos, sin) as two real halves
        self.complex_rope = self.device.type != "mps" if complex_rope is None else complex_rope
        if restore is not None:
            self._restore(weights, restore)
        else:
            self.embed = weights["model.embed_tokens.weight"].to(self.device, embed_dtype)   # (V, E)
            self.norm = weights["model.norm.weight"].float().to(self.device)
            # The output layer before the blocks: its temporaries (as large as the embedding) then
            # come while little else is in memory, so a float32 load peaks near the model's own size.
            head = weights["lm_head.weight" if "lm_head.weight" in weights else "model.embed_tokens.weight"]  # tied
            self.rows = head.shape[0]
            # A draft may score only some tokens (``head_rows``, sorted ids): the others get logit -inf,
            # so q(x) = 0 there and the draft never proposes them. q is still exactly the distribution
            # it samples from, so the rule stays lossless; only acceptance can change.
            self.head_rows = None if head_rows is None else head_rows.to(self.device)
            self.head = make(head if head_rows is None else head[head_rows], None)
            del head
            self.layers = torch.nn.ModuleList(
                Qwen2Layer.from_weights(s, weights, make, f"model.layers.{i}.", self.device) for i in range(s.layers))
        self.inv_freq = 1.0 / s.rope_theta ** (torch.arange(0, s.head_dim, 2, dtype=torch.float32) / s.head_dim)
        # a captured graph reads the table where it was: a static model's never regrows
        self._rope_table(getattr(config, "max_position_embeddings", 1024) if static else 1024)

    def _rope_table(self, n: int) -> None:
        """e^{i * angle} for positions 0..n-1, recomputed whole when it must grow (doubling), so a
        position's angle never depends on which forward asked for it. Computed on the CPU and
        moved, so that every device rotates by the very same numbers."""
        freqs = torch.outer(torch.arange(n, dtype=torch.float32), self.inv_freq)     # (n, D/2)
        rot = torch.polar(torch.ones_like(freqs), freqs)                              # (n, D/2) complex
        self.rot = (rot if self.complex_rope else torch.view_as_real(rot)).to(self.device)  # or (n, D/2, 2)

    def packed_state(self):
        """(name, tensor) of every weight exactly as it runs (the layers' own packed forms), in
        the order :meth:`_restore` reads them back: what the cache saves once per precision."""
        yield "embed", self.embed
        yield "norm", self.norm
        yield "rows", torch.tensor(self.rows)
        if self.head_rows is not None:
            yield "head_rows", self.head_rows
        named = [(f"layers.{i}.{p}", getattr(layer, p)) for i, layer in enumerate(self.layers) for p in Qwen2Layer.PARTS]
        for i, layer in enumerate(self.layers):
            yield f"layers.{i}.attn_norm", layer.attn_norm
            yield f"layers.{i}.mlp_norm", layer.mlp_norm
        for name, lin in named + [("head", self.head)]:
            for k, t in lin.state().items():
                yield f"{name}.{k}", t
            if lin.bias is not None:
                yield f"{name}.bias", lin.bias

    def _restore(self, state, restore) -> None:
        dev = self.device

        def layer(name: str) -> PackedLinear:
            keys = [k for k in state.keys() if k.startswith(name + ".") and k != name + ".bias"]
            parts = {k[len(name) + 1:]: state[k].to(dev) for k in keys}
            return restore(parts, state[name + ".bias"].to(dev) if name + ".bias" in state else None)

        self.embed, self.norm, self.rows = state["embed"].to(dev), state["norm"].to(dev), int(state["rows"])
        self.head_rows = state["head_rows"].to(dev) if "head_rows" in state else None
        names = [f"layers.{i}.{p}" for i in range(self.shape.layers) for p in Qwen2Layer.PARTS] + ["head"]
        # Rebuilding a layer is a read plus the kernel's own weight packing (fbgemm's is single-threaded
        # and most of a start), so the layers are rebuilt on as many threads as torch computes with.
        with ThreadPoolExecutor(max(1, torch.get_num_threads())) as pool:
            built = dict(zip(names, pool.map(layer, names)))
        n = len(Qwen2Layer.PARTS)
        self.layers = torch.nn.ModuleList(
            Qwen2Layer(self.shape, state[f"layers.{i}.attn_norm"].to(dev), state[f"layers.{i}.mlp_norm"].to(dev),
                       *(built[name] for name in names[i * n:(i + 1) * n])) for i in range(self.shape.layers))
        self.head = built["head"]

    def new_cache(self, capacity: int = 512) -> KVCache:
        s = self.shape
        return KVCache(s.layers, s.kv_heads, s.head_dim, torch.float32, capacity, self.device, self.static)

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
        if cache.static:
            return self._static_forward(ids, cache, keep, tree)
        T, L = ids.shape[0], cache.length
        cache.reserve(L + T)
        top = L + T if tree is None else int(tree.positions.max()) + 1
        if top > self.rot.shape[0]:
            self._rope_table(max(top, 2 * self.rot.shape[0]))
        rows = None
        ids = ids.to(self.device, non_blocking=True)
        if tree is None:
            rot = self.rot[L:L + T]                                                      # (T, D/2)
            # Causal within the new tokens; all cached tokens are visible. One new token needs no mask.
            mask = None if T == 1 else torch.ones(T, L + T, dtype=torch.bool, device=self.device).tril(L)  # (T, L+T)
        else:
            rot = self.rot[tree.positions.to(self.device)]                               # (T, D/2)
            mask = None if tree.exact else tree.mask(L + T).to(self.device)              # (T, L+T)
            rows = tree.keys if tree.exact else None
        seen = self._seen(L, T, tree)
        x = self.embed[ids].float()                                                      # (T, E)
        if seen is not None and self.one_call:  # each layer one C++ call: the same steps, no Python between
            s, op = self.shape, native.ops().decoder_layer
            cs = (torch.view_as_real(rot) if rot.is_complex() else rot).contiguous()     # (T, D/2, 2): cos, sin
            for i, layer in enumerate(self.layers):
                isa, outs, *weights = layer.one_call()
                x = op(x, cs, cache.k[i], cache.v[i], L, *seen, layer.attn_norm, layer.mlp_norm,
                       s.eps, s.heads, isa, outs, *weights)
        else:
            for i, layer in enumerate(self.layers):
                x = layer(x, rot, cache, i, mask, rows, fused=tree is not None, seen=seen)
        cache.length = L + T
        return self._head(x[-keep:])

    @property
    def one_call(self) -> bool:
        """Whether every layer runs as one call of specdec's ``decoder_layer`` op (see
        :meth:`Qwen2Layer.one_call`); ``one_call_layers`` False runs this model's layers op by op
        (the tests and benchmarks.levers compare both)."""
        return (self.one_call_layers and self.device.type == "cpu"
                and all(layer.one_call() is not None for layer in self.layers))

    def _seen(self, L: int, T: int, tree: TreeAttention | None) -> tuple[torch.Tensor, torch.Tensor | None] | None:
        """What each new row attends to, for specdec's attention op (:mod:`specdec.model.native`): the
        number of keys and, for a tree, which ones ((T,), (T, n) or None). None where torch's
        attention runs instead: the op is not built or has no vector loop for this head size here,
        or a prompt's prefill (more than EXACT_ROWS rows, which a fused call does fastest and no
        verification is compared with)."""
        if self.device.type != "cpu" or not native.vector_attention(self.shape.head_dim) or \
                (tree is None and T > EXACT_ROWS):
            return None
        if tree is None:
            return torch.arange(L + 1, L + T + 1), None
        keys = [torch.arange(k) if isinstance(k, int) else k for k in tree.keys]
        if all(isinstance(k, int) for k in tree.keys):
            return torch.tensor(tree.keys), None
        index = torch.zeros(T, max(len(k) for k in keys), dtype=torch.long)
        for t, k in enumerate(keys):
            index[t, :len(k)] = k
        return torch.tensor([len(k) for k in keys]), index

    def _head(self, x: torch.Tensor) -> torch.Tensor:
        """The final norm and the output layer: (rows, E) -> (rows, V) logits."""
        y = self.head.fused(x, norm=(self.norm, self.shape.eps))                         # rms_norm, then the matmul
        if self.head_rows is None:
            return y                                                                     # (rows, V)
        logits = x.new_full((x.shape[0], self.rows), float("-inf"))                      # (rows, V)
        logits[:, self.head_rows] = y
        return logits

    def _static_forward(self, ids: torch.Tensor, cache: KVCache, keep: int, tree: TreeAttention | None
                        ) -> torch.Tensor:
        """T rows at slots L..L+T-1 of a static cache, padded to ``pad_rows`` (token 0 at the next
        slots, each pad row seeing the context and itself: its entries lie beyond the new length,
        so nothing ever reads them)."""
        from specdec.model.graphs import GRAPH_ROWS, Graphed
        T, L = ids.shape[0], cache.length
        R = max(T, self.pad_rows)                                                        # rows computed
        cache.reserve(L + R)
        C, dev = cache.capacity, self.device
        if L + R > self.rot.shape[0]:
            raise ValueError(f"position {L + R} is beyond the model's context of {self.rot.shape[0]} tokens")
        slots = torch.arange(L, L + R, device=dev)                                       # (R,)
        padded = torch.zeros(R, dtype=torch.long)
        padded[:T] = ids
        if tree is None:
            pos = slots                                                                  # (R,)
            mask = torch.arange(C, device=dev)[None] <= slots[:, None]                   # (R, C) causal
        else:
            pos = torch.cat([tree.positions, torch.arange(L + T, L + R)]).to(dev, non_blocking=True)
            grid = torch.zeros(R, C, dtype=torch.bool)
            grid[:T, : L + T] = tree.mask(L + T)
            grid[torch.arange(T, R), torch.arange(L + T, L + R)] = True
            mask = grid.to(dev, non_blocking=True)                                       # (R, C)
        padded = padded.to(dev, non_blocking=True)
        if self.graphs and R <= GRAPH_ROWS:
            step = cache.graphs.get(R)
            if step is None:
                step = cache.graphs[R] = Graphed(lambda *a: self._rows(*a, cache=cache, head_from=0),
                                                 (padded, pos, slots, mask))
            logits = step(padded, pos, slots, mask)[T - keep:T].clone()  # the graph's output is reused
        else:
            logits = self._rows(padded, pos, slots, mask, cache=cache, head_from=T - keep)[: keep]
        cache.length = L + T
        return logits

    def _rows(self, ids: torch.Tensor, pos: torch.Tensor, slots: torch.Tensor, mask: torch.Tensor, *,
              cache: KVCache, head_from: int) -> torch.Tensor:
        """The static forward proper, tensors in and out (what a CUDA graph captures): ids, pos,
        slots (R,), mask (R, C) -> logits of rows head_from.. (R - head_from, V)."""
        x = self.embed[ids].float()                                                      # (R, E)
        rot = self.rot[pos]                                                              # (R, D/2)
        for i, layer in enumerate(self.layers):
            x = layer(x, rot, cache, i, mask, slots=slots)
        return self._head(x[head_from:])
