"""The on-disk cache: where its files live, the checks that guard them, the one checksum routine,
and ``python -m specdec cache [clear [--all]]``.

The cache (``$SPECDEC_CACHE``, else the platform's user cache directory) holds, per embedded model
(a folder named by the first 16 hex digits of its GGUF's sha256):

* ``meta/``                 config, tokenizer and tensor table from the GGUF's header (MBs)
* ``packed-*.safetensors``  the layers exactly as they run, one file per precision chosen (+ ``.sha256``)
* ``model.gguf``            the assembled GGUF, made only for llama.cpp (``make bench``)

and beside them ``calibration/`` (the kernel timings, two minutes to redo) and ``llama.cpp-*/``
(the benchmark build of llama.cpp). The weights themselves stay in the installed part packages.

**Never compute on bytes that were not read.** A cached file is renamed into place only when
complete (:func:`specdec.weights.packed.write`), with a sidecar ``*.sha256`` holding the checksum of the
bytes as they were written. :func:`check` compares the file's size with the sidecar's, and its
checksum once per file state (a stamp of size and mtime records that it passed; a file rewritten
in place gets a new mtime and is checked again). A failure is :class:`DamagedFile`, naming the
file; :mod:`specdec.weights.loading` then rebuilds it from the GGUF.
"""
from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Callable, Iterable, Iterator

from specdec.options import cache_root
from specdec.weights.catalogue import EMBEDDED

CHUNK = 1 << 22   # bytes read at a time when hashing a file
PACK_FORMAT = 2   # bump when packed_state's names or a layer's state change: older files are rebuilt


def model_root(spec) -> Path:
    """The folder of an embedded model (:class:`specdec.weights.catalogue.EmbeddedModel`)."""
    return cache_root() / spec.sha256[:16]


def packed_file(spec, precision, device, draft_vocab: int = 0) -> Path:
    """Where the layers of ``spec`` in ``precision`` (:class:`specdec.model.precision.Precision`) for
    ``device`` are cached."""
    vocab = f"-vocab{draft_vocab}" if draft_vocab else ""
    return model_root(spec) / f"packed-{precision.cache_key(device)}{vocab}-f{PACK_FORMAT}.safetensors"


# ---- checks ----

class DamagedFile(OSError):
    """A cached file is not what was written: truncated, altered, or without its checksum."""


def sha256(chunks: Iterable, into: BinaryIO | None = None) -> str:
    """The hex sha256 of a stream of byte chunks, each written on to ``into`` as it is hashed: every
    checksum of the cache and of the GGUF parts is this one routine."""
    digest = hashlib.sha256()
    for chunk in chunks:
        digest.update(chunk)
        if into is not None:
            into.write(chunk)
    return digest.hexdigest()


def read_chunks(paths: Iterable[Path], before: Callable[[int], None] | None = None) -> Iterator[bytes]:
    """The bytes of ``paths`` one after the other, ``CHUNK`` at a time; ``before(i)`` before file i."""
    for i, path in enumerate(paths):
        if before:
            before(i)
        with open(path, "rb") as f:
            while chunk := f.read(CHUNK):
                yield chunk


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def seal(path: Path, checksum: str) -> None:
    """Record the checksum of a file just written, and that it passed (its size and mtime)."""
    stat = Path(path).stat()
    _sidecar(Path(path)).write_text(json.dumps({"sha256": checksum, "bytes": stat.st_size,
                                                "checked": [stat.st_size, stat.st_mtime_ns]}))


def check(path: Path) -> None:
    """Raise :class:`DamagedFile` unless ``path`` is whole and its checksum (once per file state) matches."""
    path = Path(path)
    side = _sidecar(path)
    try:
        record = json.loads(side.read_text())
    except (OSError, ValueError):
        raise DamagedFile(f"{path}: its checksum file {side.name} is missing or unreadable") from None
    size = path.stat().st_size
    if size != record["bytes"]:
        raise DamagedFile(f"{path}: {size} bytes on disk, {record['bytes']} written")
    stamp = [size, path.stat().st_mtime_ns]
    if record.get("checked") == stamp:
        return
    got = sha256(read_chunks([path]))
    if got != record["sha256"]:
        raise DamagedFile(f"{path}: its bytes changed since it was written (sha256 {got[:12]}..., "
                          f"written {record['sha256'][:12]}...)")
    side.write_text(json.dumps({**record, "checked": stamp}))


def remove(path: Path) -> None:
    """Delete a cached file and its checksum."""
    for p in (Path(path), _sidecar(Path(path))):
        p.unlink(missing_ok=True)


# ---- python -m specdec cache ----

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
