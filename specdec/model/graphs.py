"""CUDA graphs: one forward of a fixed row count, captured once and replayed (after gpt-fast).

An eager forward of a 28-layer model launches a few hundred small kernels; at one token per
forward on a GPU their launch cost, not the arithmetic, sets the time. A CUDA graph records the
launches of one forward once and replays them with a single call. It replays exactly the
captured work on exactly the captured memory, so everything that varies between calls must be
an input tensor copied into the captured one: the token ids, their RoPE positions, the cache
slots they are written to and the attention mask. That is what the static path of
:class:`specdec.model.qwen2.LeanQwen2` (``_rows``) takes; the KV cache is fixed memory of a fixed
capacity, and a cache that grows drops its graphs (``KVCache.reserve``).

Used for the draft's one-token step and for the verifier's padded K+1-row verification: one
graph per row count and cache. Only on CUDA: MPS has no graphs and stays eager. Never run on
the CPU (``Graphed`` refuses it): there the same ``_rows`` runs eagerly and the tests check it.
"""
from __future__ import annotations

from typing import Callable

import torch

GRAPH_ROWS = 64  # forwards of up to this many rows are captured; longer ones (prefill chunks) run eagerly
WARMUP = 2       # eager calls on a side stream before capture (cuBLAS workspaces, lazy initialisation)


def available(device: torch.device) -> bool:
    return device.type == "cuda" and torch.cuda.is_available()


class Graphed:
    """``fn(*inputs)`` captured as one CUDA graph; calling it copies new inputs in and replays.

    The warm-up calls run ``fn`` on the first inputs for real, and so does the first replay, so
    the first call's side effects (its cache writes) are those of one eager call: the same inputs
    give the same writes."""

    def __init__(self, fn: Callable[..., torch.Tensor], inputs: tuple[torch.Tensor, ...]):
        if not inputs or not available(inputs[0].device):
            raise RuntimeError("CUDA graphs need CUDA tensors")
        self.inputs = tuple(t.clone() for t in inputs)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(WARMUP):
                fn(*self.inputs)
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.output = fn(*self.inputs)

    def __call__(self, *inputs: torch.Tensor) -> torch.Tensor:
        for buf, x in zip(self.inputs, inputs):
            buf.copy_(x, non_blocking=True)
        self.graph.replay()
        return self.output
