"""Stops a local run's private Ray cluster when its driver dies without cleaning up (SIGKILL, the OOM
killer): Ray's dashboard and runtime-env agents outlive a killed driver by minutes otherwise.

The driver starts `python -m rayrl.reaper <driver pid> <pid>...` right after `ray.init`, naming the
cluster processes it started; this process waits for the driver to exit, then ends whatever is left."""

from __future__ import annotations

import subprocess
import sys

GRACE_S = 5.0  # SIGTERM first; SIGKILL what is still running after this


def start(driver_pid: int) -> subprocess.Popen | None:
    """Watch the driver's current descendants (the private cluster it just started)."""
    import psutil

    pids = [str(p.pid) for p in psutil.Process(driver_pid).children(recursive=True)]
    if not pids:
        return None
    return subprocess.Popen([sys.executable, "-m", "rayrl.reaper", str(driver_pid), *pids], start_new_session=True,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def reap(driver_pid: int, pids: list[int]) -> None:
    import psutil

    watched = []
    for pid in pids:  # Process objects remember the start time, so a reused pid is never touched
        try:
            watched.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            pass
    try:
        psutil.Process(driver_pid).wait()
    except psutil.NoSuchProcess:
        pass
    alive = [p for p in watched if p.is_running()]
    for p in alive:
        try:
            p.terminate()
        except psutil.NoSuchProcess:
            pass
    _, left = psutil.wait_procs(alive, timeout=GRACE_S)
    for p in left:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass


if __name__ == "__main__":
    reap(int(sys.argv[1]), [int(a) for a in sys.argv[2:]])
