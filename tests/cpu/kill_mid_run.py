"""A thread that kills a named restartable actor once its stats() say it is busy, then waits for Ray to bring it
back: the served-model fault tests (reward models, teachers)."""

from __future__ import annotations

import threading
import time

import ray


def kill_once_restarted(name: str, namespace: str, busy, pids: list[int], limit_s: float = 240) -> threading.Thread:
    """Started thread: kills `name` once busy(stats) holds, appending its pid, then the restarted one's."""

    def run() -> None:
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            try:
                actor = ray.get_actor(name, namespace=namespace)
                stats = ray.get(actor.stats.remote(), timeout=5)
            except (ValueError, ray.exceptions.RayError):
                time.sleep(0.2)
                continue
            if not pids and busy(stats):
                pids.append(stats["pid"])
                ray.kill(actor, no_restart=False)  # Ray brings it back (its max_restarts)
            elif pids and stats["pid"] != pids[0]:
                pids.append(stats["pid"])
                return
            time.sleep(0.2)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread
