"""What the on-disk cache holds, and clearing it: ``python -m specdec cache [clear [--all]]``.

The cache (``$SPECDEC_CACHE``, else the platform's user cache directory) holds, per embedded model
(a folder named by the first 16 hex digits of its GGUF's sha256):

* ``meta/``                 config, tokenizer and tensor table from the GGUF's header (MBs)
* ``packed-*.safetensors``  the layers exactly as they run, one file per precision chosen (+ ``.sha256``)
* ``model.gguf``            the assembled GGUF, made only for llama.cpp (``make bench``)
* ``converted-float32/``    specdec 0.3.0's float32 conversion: dead weight, removed on the next load

and beside them ``calibration/`` (the kernel timings, two minutes to redo) and ``llama.cpp-*/``
(the benchmark build of llama.cpp). The weights themselves stay in the installed part packages.
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from .embedded import EMBEDDED, cache_root, model_root


@dataclass(frozen=True)
class Entry:
    path: Path
    bytes: int
    what: str
    model: bool  # removed by ``cache clear`` (else only by ``clear --all``)


def _size(path: Path) -> int:
    if path.is_file() or path.is_symlink():
        return path.lstat().st_blocks * 512  # what it really takes: the header stand-in is sparse
    return sum(p.lstat().st_blocks * 512 for p in path.rglob("*") if p.is_file())


def _describe(path: Path) -> str:
    name = path.name
    if name == "meta":
        return "config, tokenizer and tensor table (from the GGUF header)"
    if name.startswith("packed-") and name.endswith(".safetensors"):
        return f"layers as they run: {name.removeprefix('packed-').removesuffix('.safetensors')}"
    if name.endswith(".sha256"):
        return "checksum of the file beside it"
    if name == "model.gguf":
        return "assembled GGUF, for llama.cpp benchmarks only"
    if name == "converted-float32":
        return "old layout (specdec 0.3.0): removed on the next load"
    if name.endswith(".partial") or name.startswith(".meta-"):
        return "left by an interrupted run: never used"
    return "unknown"


def inventory(root: Path | None = None) -> list[Entry]:
    root = cache_root() if root is None else root
    if not root.is_dir():
        return []
    names = {model_root(spec).name: spec.name for spec in EMBEDDED.values()}
    out = []
    for top in sorted(root.iterdir()):
        if top.name in names and top.is_dir():
            out += [Entry(p, _size(p), f"{names[top.name]}: {_describe(p)}", True) for p in sorted(top.iterdir())]
        elif top.name == "calibration":
            out.append(Entry(top, _size(top), "kernel timings of this machine (about two minutes to redo)", False))
        elif top.name.startswith("llama.cpp-"):
            out.append(Entry(top, _size(top), "llama.cpp build for the benchmarks (about four minutes to redo)", False))
        else:
            out.append(Entry(top, _size(top), "unknown", False))
    return out


def _gb(n: int) -> str:
    return f"{n / 1e9:7.2f} GB" if n >= 1e7 else f"{n / 1e6:7.2f} MB"


def show(root: Path | None = None) -> str:
    root = cache_root() if root is None else root
    entries = inventory(root)
    lines = [f"cache: {root}" + ("" if root.is_dir() else " (empty)")]
    for e in entries:
        lines.append(f"{_gb(e.bytes)}  {e.path.relative_to(root)}: {e.what}")
    lines.append(f"{_gb(sum(e.bytes for e in entries))}  in all; `python -m specdec cache clear` removes the model "
                 f"files ({_gb(sum(e.bytes for e in entries if e.model)).strip()}), `clear --all` everything")
    return "\n".join(lines)


def clear(everything: bool = False, root: Path | None = None) -> int:
    """Remove the model files (or, with ``everything``, the whole cache); the bytes freed."""
    freed = 0
    for e in inventory(root):
        if e.model or everything:
            shutil.rmtree(e.path) if e.path.is_dir() and not e.path.is_symlink() else e.path.unlink()
            freed += e.bytes
    return freed
