"""Before `make app`: say up front when memory or disk is short, with the numbers, instead of
failing halfway through a first run. Standard library only: it runs before the venv exists.

A first run peaks near 4 GiB of resident memory and leaves about 3 GB in the cache (the
installed part packages take another 1.5 GB, the venv about 2 GB); 8 GB free of each leaves
room for the browser and the rest of the machine. Prints warnings only; exits 0 either way.
"""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

NEED_GB = 8.0


def free_memory_gb() -> float | None:
    """MemAvailable on Linux (what can be had without swapping); None where it cannot be read."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024 / 1e9
    except OSError:
        pass
    return None


def cache_dir() -> Path:
    if os.environ.get("SPECDEC_CACHE"):
        return Path(os.environ["SPECDEC_CACHE"])
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "specdec"
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "specdec"


def free_disk_gb(path: Path) -> float:
    while not path.exists():  # the cache may not exist yet: ask the filesystem it will be on
        path = path.parent
    return shutil.disk_usage(path).free / 1e9


def warm(cache: Path) -> bool:
    """Whether both default models' packed layers are already cached (a start then needs little)."""
    return len(list(cache.glob("*/packed-*.safetensors"))) >= 2


def warnings(mem: float | None, disk: float, cache: Path, is_warm: bool) -> list[str]:
    out = []
    if mem is not None and mem < NEED_GB:
        out.append(f"only {mem:.1f} GB of memory is free (want {NEED_GB:.0f} GB): "
                   + ("the models need about 3.5 GB while they run" if is_warm else
                      "a first run peaks near 4.3 GB (4 GiB) while it packs the models; close other programs "
                      "if it is killed"))
    if disk < NEED_GB and not is_warm:
        out.append(f"only {disk:.1f} GB of disk is free at {cache} (want {NEED_GB:.0f} GB): the first run writes "
                   "about 3 GB there; set SPECDEC_CACHE to a roomier place or free some space")
    return out


def main() -> int:
    cache = cache_dir()
    for line in warnings(free_memory_gb(), free_disk_gb(cache), cache, warm(cache)):
        print(f"warning: {line}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
