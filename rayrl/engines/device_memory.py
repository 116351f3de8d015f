"""GPU memory as nvidia-smi sees it (every process on the device), for the colocated phases' peaks.

Read through NVML, so a process that never touched CUDA (a rollout worker whose vLLM runs elsewhere)
does not create a CUDA context just to ask. 0.0 where there is no GPU.
"""

from __future__ import annotations

import torch

GIB = 2**30


def device_used_gb() -> float:
    if not torch.cuda.is_available():
        return 0.0
    try:
        return torch.cuda.device_memory_used() / GIB
    except (ImportError, ModuleNotFoundError, RuntimeError):  # no NVML bindings: ask CUDA, if this process uses it
        if not torch.cuda.is_initialized():
            return 0.0
        free, total = torch.cuda.mem_get_info()
        return (total - free) / GIB


class PeakMemory:
    """The device's peak over a phase in which only this process allocates: what the device held at the
    start plus this process's highest reserve above its reserve then (torch's allocator counts it)."""

    def __init__(self) -> None:
        self.on = torch.cuda.is_available() and torch.cuda.is_initialized()
        if self.on:
            torch.cuda.reset_peak_memory_stats()
            self.start_gb, self.reserved = device_used_gb(), torch.cuda.memory_reserved()

    def peak_gb(self) -> float:
        if not self.on:
            return 0.0
        return self.start_gb + (torch.cuda.max_memory_reserved() - self.reserved) / GIB
