"""GGUF dequantization in torch, for the block types the embedded models use.

The ``gguf`` package's numpy code is the reference; these are the same operations in the same
order on torch tensors (so the same float32 results, bit for bit: ``tests/model/test_weights_cache.py``
compares them on random blocks), which run on all the cores and without the GIL. Dequantizing is
most of a first run (benchmarks/results/first_run-*.json), and numpy's runs on one core.

Each function maps (blocks, bytes per block) uint8 to (blocks, weights per block) float32.
"""
from __future__ import annotations

import torch

QK_K = 256  # weights per K-quant super-block


def _f16(b: torch.Tensor) -> torch.Tensor:
    """(n, 2) uint8 little-endian halves -> (n, 1) float32."""
    return b.contiguous().view(torch.float16).float()


def _shifts(*s: int) -> torch.Tensor:
    return torch.tensor(s, dtype=torch.uint8)


def q8_0(blocks: torch.Tensor) -> torch.Tensor:
    d, x = blocks[:, :2], blocks[:, 2:]
    return x.contiguous().view(torch.int8).float() * _f16(d)


def q5_0(blocks: torch.Tensor) -> torch.Tensor:
    n = blocks.shape[0]
    d, qh, qs = _f16(blocks[:, :2]), blocks[:, 2:6], blocks[:, 6:]
    qh = qh.contiguous().view(torch.int32).reshape(n, 1) >> torch.arange(32, dtype=torch.int32).reshape(1, 32)
    ql = qs.reshape(n, -1, 1, 16) >> _shifts(0, 4).reshape(1, 1, 2, 1)
    qh = (qh & 1).to(torch.uint8)
    ql = (ql & 0x0F).reshape(n, -1)
    q = (ql | (qh << 4)).to(torch.int8) - 16
    return d * q.float()


def _scale_min_k4(scales: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    n = scales.shape[0]
    s = scales.reshape(n, 3, 4)
    d, m, m_d = s[:, 0], s[:, 1], s[:, 2]
    sc = torch.cat([d & 0x3F, (m_d & 0x0F) | ((d >> 2) & 0x30)], -1)
    mn = torch.cat([m & 0x3F, (m_d >> 4) | ((m >> 2) & 0x30)], -1)
    return sc.reshape(n, 8), mn.reshape(n, 8)


def q4_k(blocks: torch.Tensor) -> torch.Tensor:
    n = blocks.shape[0]
    d, dmin, scales, qs = _f16(blocks[:, :2]), _f16(blocks[:, 2:4]), blocks[:, 4:16], blocks[:, 16:]
    sc, m = _scale_min_k4(scales)
    d = (d * sc.float()).reshape(n, -1, 1)
    dm = (dmin * m.float()).reshape(n, -1, 1)
    q = qs.reshape(n, -1, 1, 32) >> _shifts(0, 4).reshape(1, 1, 2, 1)
    q = (q & 0x0F).reshape(n, -1, 32).float()
    return (d * q - dm).reshape(n, QK_K)


def q6_k(blocks: torch.Tensor) -> torch.Tensor:
    n = blocks.shape[0]
    ql, qh = blocks[:, :QK_K // 2], blocks[:, QK_K // 2:QK_K // 2 + QK_K // 4]
    scales, d = blocks[:, QK_K // 2 + QK_K // 4:-2], blocks[:, -2:]
    d = (_f16(d) * scales.contiguous().view(torch.int8).float()).reshape(n, QK_K // 16, 1)
    ql = ql.reshape(n, -1, 1, 64) >> _shifts(0, 4).reshape(1, 1, 2, 1)
    ql = (ql & 0x0F).reshape(n, -1, 32)
    qh = qh.reshape(n, -1, 1, 32) >> _shifts(0, 2, 4, 6).reshape(1, 1, 4, 1)
    qh = (qh & 0x03).reshape(n, -1, 32)
    q = (ql | (qh << 4)).to(torch.int8) - 32
    return (d * q.reshape(n, QK_K // 16, -1).float()).reshape(n, QK_K)


# GGMLQuantizationType value -> (weights per block, bytes per block, function)
KINDS = {8: (32, 34, q8_0), 6: (32, 22, q5_0), 12: (QK_K, 144, q4_k), 14: (QK_K, 210, q6_k)}


def dequantize(raw: torch.Tensor, kind: int, columns: int) -> torch.Tensor:
    """(rows, bytes per row) uint8 of block type ``kind`` -> (rows, columns) float32."""
    _, size, f = KINDS[kind]
    rows = raw.shape[0]
    return f(raw.reshape(-1, size)).reshape(rows, columns)
