"""Each GPU's busy fraction over a time window: NVML's utilization (the share of time a kernel ran), sampled
in a background thread; kept with timestamps so a run's loop window can be cut out after it ends."""

from __future__ import annotations

import os
import statistics
import threading
import time
from pathlib import Path


class GpuBusySampler:
    def __init__(self, period_s: float = 0.2) -> None:
        """No GPU or no NVML: samples nothing, and busy() answers None."""
        self.period_s, self.samples = period_s, []  # (time.time(), [percent per GPU])
        self._stop = threading.Event()
        try:
            import pynvml

            pynvml.nvmlInit()
            self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
            self._nvml = pynvml
        except Exception:  # noqa: BLE001 - no driver, no library: the benchmark runs on CPU
            self._handles = []
        self._thread = threading.Thread(target=self._run, name="gpu-busy", daemon=True)

    def __enter__(self) -> "GpuBusySampler":
        if self._handles:
            self._thread.start()
        return self

    def __exit__(self, *_) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            self.samples.append((time.time(), [self._nvml.nvmlDeviceGetUtilizationRates(h).gpu for h in self._handles]))

    def busy(self, start: float, end: float) -> list[float] | None:
        """Mean busy fraction of each GPU between two time.time() stamps."""
        inside = [u for t, u in self.samples if start <= t <= end]
        if not inside:
            return None
        return [statistics.fmean(u[g] for u in inside) / 100 for g in range(len(self._handles))]


def cuda_mps() -> bool:
    """Whether a CUDA MPS control daemon serves this machine (its control pipe exists): with one, vLLM's and the
    learner's kernels run on the GPU at once; without, their processes take turns by time slice."""
    return (Path(os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps")) / "control").exists()
