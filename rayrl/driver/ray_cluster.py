"""Starting or joining the Ray cluster a run uses."""

from __future__ import annotations

import os

import ray

from rayrl import reaper
from rayrl.config import SchedulerConfig


def loopback_only() -> None:
    """Ray's switch for a one-machine cluster (RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0): every process it starts binds
    127.0.0.1. Ray reads it once at import, so this process's copy is set as well."""
    from ray._private import ray_constants

    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False


def start_ray(scheduler: SchedulerConfig, num_cpus: int) -> bool:
    """Start (scheduler.type=local) or join (ray) a cluster unless one is already up; True if we started it."""
    if ray.is_initialized():
        return False
    if scheduler.type == "local":
        if scheduler.loopback_only:
            loopback_only()
        ray.init(address="local", num_cpus=max(num_cpus, os.cpu_count() or 1),
                 include_dashboard=scheduler.include_dashboard, dashboard_host=scheduler.dashboard_host)
        reaper.start(os.getpid())  # the private cluster goes with the driver, even when it is killed
    else:
        ray.init(address=scheduler.address)
    return True
