"""One CPU performance fix that speculative decoding depends on.

Verifying K drafts costs one forward over K+1 positions, which pays off only if that forward
costs about as much as a one-token forward. On CPUs without native bf16 matmuls (AVX2 machines,
such as the 2-core box the README measures on) two things break that: bf16/fp16 matmuls are
emulated and cost grows linearly with the rows; and in float32, ``F.linear`` (x @ W^T) hits a
slow MKL path for 2-16 rows, costing 2.5-5x a single row. Computing (W @ x^T)^T instead takes
MKL's fast path: 5 rows cost ~1.5x one row. Same maths, same weights; only the summation
kernel differs, at float32 rounding level.
"""
from __future__ import annotations

import types

import torch
import torch.nn.functional as F

SMALL_ROWS = 64  # beyond this, ordinary gemm is efficient anyway


def _linear_small_rows(self: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    rows = x.numel() // x.shape[-1]
    if rows > SMALL_ROWS:
        return F.linear(x, self.weight, self.bias)
    y = (self.weight @ x.reshape(rows, x.shape[-1]).T).T  # (rows, out)
    if self.bias is not None:
        y = y + self.bias
    return y.reshape(*x.shape[:-1], self.out_features)


def speed_up_cpu_linears(model: torch.nn.Module) -> int:
    """Route the float32 CPU Linear layers of ``model`` through the fast small-row path."""
    patched = 0
    for module in model.modules():
        if type(module) is torch.nn.Linear and module.weight.device.type == "cpu" \
                and module.weight.dtype == torch.float32:
            module.forward = types.MethodType(_linear_small_rows, module)
            patched += 1
    return patched
