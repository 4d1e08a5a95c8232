"""What every benchmark JSON carries next to its numbers: hardware (CPU model and flags), the
precision chosen and why, versions and commit."""
from __future__ import annotations

import datetime
import json
import os
import platform
import re
import subprocess
from pathlib import Path

import torch
import transformers

from specdec.model.precision import cpu_description

ROOT = Path(__file__).resolve().parents[1]


def environment(pair) -> dict:
    """The machine (:func:`machine`) and the precisions the loaded ``pair`` runs in."""
    return {**machine(pair.device),
            "precision": pair.precision.label, "precision_reason": pair.precision.reason,
            "draft_precision": pair.draft_precision.label if pair.draft_precision else None,
            "draft_precision_reason": pair.draft_precision.reason if pair.draft_precision else None}


def machine(device: torch.device) -> dict:
    """Date, commit, hardware (CPU model and flags), device and versions."""
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                text=True, check=True).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                                    capture_output=True, text=True).stdout.strip())
    except (OSError, subprocess.CalledProcessError):
        commit, dirty = "unknown", False
    cpu = cpu_description()
    accel = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": commit + ("-dirty" if dirty else ""),
        "hardware": {"cpu": cpu["model"], "cpu_flags": cpu["flags"], "torch_isa": cpu["isa"],
                     "cores": os.cpu_count(), "torch_threads": torch.get_num_threads(), "accelerator": accel},
        "cpu_slug": re.sub(r"[^a-z0-9]+", "-", (f"{device.type} {cpu['model']} {cpu_family(cpu['flags'])}"
                                                if device.type == "cpu" else f"{device.type} {accel}").lower()).strip("-"),
        "device": str(device),
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "transformers": transformers.__version__},
    }


def cpu_family(flags: list[str]) -> str:
    """What tells machines of one model name apart (an AMD EPYC is a Zen 3 with AVX2 only, or a Zen 4
    with AVX-512 VNNI; a Xeon shows AMX or has it hidden by its hypervisor): the widest integer path."""
    flags = set(flags)
    return ("amx" if "amx_int8" in flags else "avx512-vnni" if "avx512_vnni" in flags else
            "avx512" if "avx512f" in flags else "avx2" if "avx2" in flags else "baseline")


def timed_variants(k: int, names: tuple[str, ...] | None = None) -> list:
    """The CPU kernel variants worth measuring further here: every one the calibration timed
    within ``SKIP_FACTOR`` of the fastest at one row (a reference path, seconds a forward, is left
    out), optionally of the given representations."""
    from specdec.model.calibration import SKIP_FACTOR
    from specdec.model.precision import cpu_timings, cpu_variants
    timings = cpu_timings(k)
    fastest = min(t[0] for t in timings.values())
    return [v for v in cpu_variants() if (names is None or v.name in names)
            and timings.get(v.label, [0])[0] <= SKIP_FACTOR * fastest]


def write_json(path: Path, payload: dict) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload, indent=1))
    tmp.replace(path)
