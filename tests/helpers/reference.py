"""A float32 reference forward of a Qwen2 model that never holds the model: transformers' own decoder
layers, built one at a time from float32 weights and freed after use, the embedding and the output
layer read in slices of rows. The 1.5B verifier's reference then needs about half a GB beside the
loaded pair (a whole float32 copy would be 7 GB), and shares no code with specdec's forward or kernels."""
from __future__ import annotations

import copy
from typing import Callable

import torch

SLICE = 8192  # rows of the embedding and the output layer in memory at a time
Rows = Callable[[str, int, int], torch.Tensor]  # (name, start, stop) -> float32 rows of that tensor


@torch.inference_mode()
def reference_logits(config, weights, rows: Rows, ids: list[int], vocab: int) -> torch.Tensor:
    """(T, vocab) float32 logits of every position of ``ids``, in one causal pass over all T.
    ``weights[name]``: a float32 tensor by transformers' name (read when asked for); ``rows``: a
    slice of one, for the two vocabulary-sized tensors."""
    from transformers.models.qwen2.modeling_qwen2 import Qwen2DecoderLayer, Qwen2RMSNorm, Qwen2RotaryEmbedding
    config = copy.deepcopy(config)
    config._attn_implementation = "eager"  # the plain maths; the causal mask is given explicitly below
    T, ids_t = len(ids), torch.tensor(ids)
    x = torch.empty(T, config.hidden_size)                                              # (T, E)
    for r in range(0, config.vocab_size, SLICE):
        part = rows("model.embed_tokens.weight", r, r + SLICE)
        hit = (ids_t >= r) & (ids_t < r + len(part))
        x[hit] = part[ids_t[hit] - r]
    x = x[None]                                                                         # (1, T, E)
    rope = Qwen2RotaryEmbedding(config)(x, torch.arange(T)[None])
    mask = torch.full((T, T), float("-inf")).triu(1)[None, None]                        # (1, 1, T, T) additive
    for i in range(config.num_hidden_layers):
        with torch.device("meta"):
            layer = Qwen2DecoderLayer(config, i)
        prefix = f"model.layers.{i}."
        layer.load_state_dict({k: weights[prefix + k] for k in layer.state_dict()}, assign=True)
        x = layer(x, attention_mask=mask, position_embeddings=rope)
        del layer
    with torch.device("meta"):
        norm = Qwen2RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
    norm.load_state_dict({"weight": weights["model.norm.weight"]}, assign=True)
    x = norm(x)[0]                                                                      # (T, E)
    head = "lm_head.weight" if "lm_head.weight" in weights else "model.embed_tokens.weight"  # tied
    return torch.cat([x @ rows(head, r, min(r + SLICE, vocab)).T for r in range(0, vocab, SLICE)], -1)  # (T, vocab)
