"""Cached weight files: written one tensor at a time, checked before any byte is computed on.

The format is safetensors (an 8-byte header length, a JSON header of names, dtypes, shapes and
byte ranges, then the raw bytes), written here one tensor at a time, so that a write never holds a
second copy of a model in memory. Every tensor starts on a 64-byte boundary of the file (the gaps
are ``__padding.N`` entries, so the file stays valid safetensors), so a reader can **map** the
file and hand out tensors that are the file's own pages: layers whose runtime form is what was
saved (:mod:`specdec.model.native`) start without reading or repacking anything.

A file is written to ``*.partial`` and renamed into place only when complete, its checksum
sealed beside it (:mod:`specdec.weights.store`, which checks it before use); every open checks the file's
size against its own header (a copy cut short by a full disk or an interrupted copy fails here),
and every read checks it got every byte it asked for.
"""
from __future__ import annotations

import json
import mmap
import os
from pathlib import Path
from typing import Iterable

import torch

from specdec.weights.store import DamagedFile, seal, sha256

DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "I8": torch.int8, "U8": torch.uint8,
          "I32": torch.int32, "I64": torch.int64}
NAMES = {v: k for k, v in DTYPES.items()}
ALIGN = 64       # every tensor's first byte, in the file: a cache line, a page-aligned mapping keeps it
PADDING = "__padding."


def write(path: Path, tensors: Iterable[tuple[str, torch.Tensor]], metadata: dict[str, str] | None = None) -> None:
    """Write ``(name, tensor)`` pairs as one safetensors file, atomically, with its checksum."""
    path = Path(path)
    items, offset = [], 0
    header: dict = {"__metadata__": {k: str(v) for k, v in (metadata or {}).items()}}
    for name, t in tensors:
        if offset % ALIGN:
            gap = ALIGN - offset % ALIGN
            pad = torch.zeros(gap, dtype=torch.uint8)
            items.append((f"{PADDING}{len(items)}", pad))
            header[items[-1][0]] = {"dtype": "U8", "shape": [gap], "data_offsets": [offset, offset + gap]}
            offset += gap
        t = t.detach()
        n = t.numel() * t.element_size()
        items.append((name, t))
        header[name] = {"dtype": NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-(8 + len(raw)) % ALIGN)  # the data starts on an ALIGN boundary
    tmp = path.with_name(path.name + ".partial")
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with open(tmp, "wb") as f:
            checksum = sha256(_chunks(raw, items), into=f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)  # the file appears whole or not at all
    finally:
        if tmp.exists():
            tmp.unlink()
    seal(path, checksum)


def _chunks(header: bytes, items: list[tuple[str, torch.Tensor]]):
    yield len(header).to_bytes(8, "little")
    yield header
    for _, t in items:
        yield t.contiguous().cpu().reshape(-1).view(torch.uint8).numpy()  # a view: no copy


class TensorTable:
    """Tensors by name, each read only when asked for, from where its table entry says: what
    :class:`specdec.model.qwen2.LeanQwen2` is built from (a packed file here, the GGUF's parts in
    :class:`specdec.weights.gguf.GGUFWeights`)."""

    def __init__(self, table: dict[str, dict]):
        self.table = table

    def __contains__(self, key: str) -> bool:
        return key in self.table

    def keys(self):
        return self.table.keys()

    def __getitem__(self, key: str) -> torch.Tensor:
        return self.read(key, self.table[key])

    def read(self, key: str, entry: dict) -> torch.Tensor:
        raise NotImplementedError


class Reader(TensorTable):
    """The tensors of a file, by name. The size is checked against the header on open.

    By default each tensor is read into memory of its own, and every read must return every byte
    of it (for layers that repack what they read: a mapping would keep the file's pages resident
    beside the repacked copy). With ``mapped`` the tensors are views of the file mapped
    copy-on-write: no read and no copy, the pages come in as a forward first touches them."""

    def __init__(self, path: Path, mapped: bool = False):
        self.path = Path(path)
        size = self.path.stat().st_size
        with open(self.path, "rb") as f:
            head = f.read(8)
            n = int.from_bytes(head, "little") if len(head) == 8 else -1
            if not 0 < n <= size - 8:
                raise DamagedFile(f"{self.path}: not a safetensors file (header length {n}, file {size} bytes)")
            try:
                header = json.loads(f.read(n))
            except ValueError:
                raise DamagedFile(f"{self.path}: its header is not valid JSON") from None
        self.metadata = header.pop("__metadata__", {})
        self.base = 8 + n
        end = max((v["data_offsets"][1] for v in header.values()), default=0)
        if size != self.base + end:
            raise DamagedFile(f"{self.path}: {size} bytes, its header describes {self.base + end}")
        super().__init__({k: v for k, v in header.items() if not k.startswith(PADDING)})
        self._bytes = None
        if mapped and size:
            with open(self.path, "rb") as f:
                view = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)  # private: nothing writes the file
            if hasattr(view, "madvise"):
                view.madvise(mmap.MADV_WILLNEED)  # read ahead in the background
            self._bytes = torch.frombuffer(view, dtype=torch.uint8)

    def read(self, key: str, info: dict) -> torch.Tensor:
        start, end = info["data_offsets"]
        out = torch.empty(info["shape"], dtype=DTYPES[info["dtype"]])
        want = out.numel() * out.element_size()
        if end - start != want:
            raise DamagedFile(f"{self.path}: tensor {key} has a corrupt header entry")
        if self._bytes is not None and (self.base + start) % out.element_size() == 0:
            return self._bytes[self.base + start:self.base + end].view(out.dtype).view(out.shape)
        with open(self.path, "rb") as f:
            f.seek(self.base + start)
            got = f.readinto(out.reshape(-1).view(torch.uint8).numpy()) if want else 0
        if got != want:
            raise DamagedFile(f"{self.path}: read {got} of the {want} bytes of {key}")
        return out

