"""What every benchmark JSON carries next to its numbers: hardware (CPU model, family and model
number, flags), the precision chosen and why, versions and commit; and the name a machine's results
go by, in file names (``cpu_slug``) and in table headings (:func:`cpu_label`)."""
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

from specdec.model import native
from specdec.model.precision import cpu_description, cpuinfo

ROOT = Path(__file__).resolve().parents[1]


def environment(pair) -> dict:
    """The machine (:func:`machine`), the precisions the loaded ``pair`` runs in and, on a CPU with
    specdec's kernels, their prefetch setting."""
    return {**machine(pair.device),
            "precision": pair.precision.label, "precision_reason": pair.precision.reason,
            "draft_precision": pair.draft_precision.label if pair.draft_precision else None,
            "draft_precision_reason": pair.draft_precision.reason if pair.draft_precision else None,
            "specdec_prefetch": native.prefetch().label if pair.device.type == "cpu" and native.available() else None}


def machine(device: torch.device) -> dict:
    """Date, commit, hardware (CPU model, family, model number and flags), device and versions."""
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                text=True, check=True).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                                    capture_output=True, text=True).stdout.strip())
    except (OSError, subprocess.CalledProcessError):
        commit, dirty = "unknown", False
    cpu, info = cpu_description(), cpuinfo()
    number = lambda field: int(info[field]) if info.get(field, "").isdigit() else None  # noqa: E731
    hardware = {"cpu": cpu["model"], "cpu_vendor": info.get("vendor_id"), "cpu_family": number("cpu family"),
                "cpu_model_number": number("model"), "cpu_flags": cpu["flags"], "torch_isa": cpu["isa"],
                "cores": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                "accelerator": torch.cuda.get_device_name(device) if device.type == "cuda" else device.type}
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": commit + ("-dirty" if dirty else ""),
        "hardware": hardware,
        "cpu_slug": machine_slug(hardware, device.type),
        "device": str(device),
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "transformers": transformers.__version__},
    }


def widest_path(flags: list[str]) -> str:
    """The flag of the widest integer dot product a CPU shows, what its kernels run on: machines of one
    family differ by it (a Xeon whose hypervisor hides AMX is another machine than the same Xeon
    showing it)."""
    return next((f for f in ("amx_int8", "avx512_vnni", "avx_vnni", "avx512f", "avx2") if f in flags), "no AVX2")


def cpu_name(hw: dict) -> str:
    """The CPU's model name without trademarks, "Processor", "CPU" or clock: "Intel Xeon"."""
    name = re.sub(r"\((R|TM|tm)\)|\b(Processor|CPU)\b|@.*", " ", hw["cpu"])
    return " ".join(name.split())


def family_model(hw: dict) -> tuple[int, int] | None:
    """The CPU's family and model number, where /proc/cpuinfo gave them: (25, 17) is a Zen 4 EPYC."""
    known = hw.get("cpu_family") is not None and hw.get("cpu_model_number") is not None
    return (hw["cpu_family"], hw["cpu_model_number"]) if known else None


def cpu_id(hw: dict, name: str | None = None) -> str:
    """The CPU's model name (or ``name``) with its family and model number where recorded:
    "AMD EPYC, family 25 model 17"."""
    fm = family_model(hw)
    return (name or hw["cpu"]) + (f", family {fm[0]} model {fm[1]}" if fm else "")


# (vendor, family, first model, last model) -> microarchitecture, for the headings only: a CPU not
# listed is named by its model name, family and model number alone
MICROARCHITECTURES = {("AuthenticAMD", 23, 0x00, 0x2F): "Zen", ("AuthenticAMD", 23, 0x30, 0xFF): "Zen 2",
                      ("AuthenticAMD", 25, 0x00, 0x0F): "Zen 3", ("AuthenticAMD", 25, 0x20, 0x5F): "Zen 3",
                      ("AuthenticAMD", 25, 0x10, 0x1F): "Zen 4", ("AuthenticAMD", 25, 0x60, 0x7F): "Zen 4",
                      ("AuthenticAMD", 25, 0xA0, 0xAF): "Zen 4",
                      ("AuthenticAMD", 26, 0x00, 0xFF): "Zen 5",
                      ("GenuineIntel", 6, 85, 85): "Skylake/Cascade Lake", ("GenuineIntel", 6, 106, 106): "Ice Lake",
                      ("GenuineIntel", 6, 143, 143): "Sapphire Rapids", ("GenuineIntel", 6, 207, 207): "Emerald Rapids",
                      ("GenuineIntel", 6, 173, 173): "Granite Rapids"}


def cpu_label(hw: dict) -> str:
    """A machine as a column heading names it: "Zen 4 (AMD EPYC, family 25 model 17, avx512_vnni)"."""
    fm = family_model(hw)
    arch = next((name for (vendor, family, lo, hi), name in MICROARCHITECTURES.items()
                 if fm and hw.get("cpu_vendor") == vendor and fm[0] == family and lo <= fm[1] <= hi), None)
    inner = f"{cpu_id(hw, cpu_name(hw))}, {widest_path(hw['cpu_flags'])}"
    return f"{arch} ({inner})" if arch else inner


def machine_slug(hw: dict, device_type: str) -> str:
    """What a result file is named by: the CPU's name, family and model number and widest integer
    path ("cpu-amd-epyc-f25m17-avx512-vnni"), so that two CPUs of one name keep their own files;
    on a GPU, its name."""
    if device_type != "cpu":
        words = f"{device_type} {hw['accelerator']}"
    else:
        fm = family_model(hw)
        words = f"cpu {cpu_name(hw)} " + (f"f{fm[0]}m{fm[1]} " if fm else "") + widest_path(hw["cpu_flags"])
    return re.sub(r"[^a-z0-9]+", "-", words.lower()).strip("-")


def timed_variants(timings: dict[str, list[float]], names: tuple[str, ...] | None = None) -> list:
    """The CPU kernel variants worth measuring further here: every one the calibration ``timings``
    (:func:`specdec.model.precision.cpu_timings`, at the default K's rows, whatever K a run asks for)
    hold within ``SKIP_FACTOR`` of the fastest at one row (a reference path, seconds a forward, is left
    out), optionally of the given representations."""
    from specdec.model.calibration import SKIP_FACTOR
    from specdec.model.precision import cpu_variants
    fastest = min(t[0] for t in timings.values())
    return [v for v in cpu_variants() if (names is None or v.name in names)
            and timings.get(v.label, [0])[0] <= SKIP_FACTOR * fastest]


def write_json(path: Path, payload: dict) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload, indent=1))
    tmp.replace(path)
