"""Where the models run, and a clock that tells the truth there.

On CUDA and MPS kernels are queued and run later, so a wall-clock reading taken right after a
forward call measures the launch, not the work: a phase would look cheap and its cost would land
in whichever later phase first waits for a result (the prefill in round 1's drafting). The
engine therefore reads time only through :class:`Clock`, which waits for queued work first.
On a CPU there is nothing to wait for and the clock is plain ``perf_counter``.
"""
from __future__ import annotations

import time

import torch

from specdec.options import ConfigError

DEVICES = ("auto", "cpu", "cuda", "mps")


def resolve_device(name: str | None = None) -> torch.device:
    """Auto: MPS, then CUDA, then CPU. An explicit name must be available on this machine."""
    if name in (None, "", "auto"):
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    ok = {"cpu": True, "cuda": torch.cuda.is_available(), "mps": torch.backends.mps.is_available()}
    kind = str(name).split(":")[0]
    if kind not in ok:
        raise ConfigError(f"device must be one of {', '.join(DEVICES)} (got {name!r})", "device")
    if not ok[kind]:
        raise ConfigError(f"device {name!r} is not available on this machine (use auto or cpu)", "device")
    return torch.device(name)


def synchronize(device: torch.device) -> None:
    """Wait for queued kernels so a wall-clock reading means what it says."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


class Clock:
    """``clock()`` -> seconds, after the device's queued work has finished."""

    def __init__(self, device: torch.device):
        self.device = device

    def __call__(self) -> float:
        synchronize(self.device)
        return time.perf_counter()
