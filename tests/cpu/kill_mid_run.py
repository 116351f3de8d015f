"""Runs that tests kill parts of: a training run in a thread of the test process (Run), and a thread that kills a
named restartable actor once its stats() say it is busy, then waits for Ray to bring it back (the served-model
fault tests: reward models, teachers)."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import ray

from rayrl.trainer import train


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


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def _steps_done(run: Path) -> int:
    return max((r["step"] for r in _lines(run / "metrics.jsonl") if "step" in r), default=0)


class Run(threading.Thread):
    """train(cfg) in a thread of the test process, on the test's cluster, so the test can kill its actors."""

    def __init__(self, cfg) -> None:
        super().__init__(daemon=True)
        self.cfg, self.summary, self.error = cfg, None, None
        self.dir = Path(cfg.metrics.run_dir) / cfg.metrics.run_name
        self.start()

    def run(self) -> None:
        try:
            self.summary = train(self.cfg)
        except BaseException as err:  # noqa: BLE001 - handed to the test
            self.error = err

    def kill_at(self, step: int, actor: str) -> int:
        """Kill the named actor (Ray may restart it) once `step` is logged; returns the step it died after."""
        while _steps_done(self.dir) < step:
            assert self.is_alive(), f"the run ended before step {step}: {self.error!r}"
            time.sleep(0.05)
        ray.kill(ray.get_actor(actor, namespace=f"rayrl-{self.dir.name}"), no_restart=False)
        return _steps_done(self.dir)

    def finish(self, timeout_s: float = 600):
        self.join(timeout_s)
        assert not self.is_alive(), "the run did not finish"
        return self.summary


def sigkill_when(run: Run, step: int, names: list[str]) -> tuple[int, float]:
    """SIGKILL the processes of the named actors (one after the other, at once) once `step` is logged; the step
    they died after and the monotonic time of the kill. Their pids are read first: a call to an actor that is
    training waits for its step to end, so asking at the step would kill after the next one's training."""
    pids = [_pid(run, name) for name in names]
    assert _steps_done(run.dir) < step, f"the actors' pids came after step {step}: the kill would land late"
    while _steps_done(run.dir) < step:
        assert run.is_alive(), f"the run ended before step {step}: {run.error!r}"
        time.sleep(0.05)
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    return _steps_done(run.dir), time.monotonic()


def _pid(run: Run, name: str) -> int:
    """The process id of the run's named actor, once the run has created it."""
    while True:
        assert run.is_alive(), f"the run ended before its actor {name} existed: {run.error!r}"
        try:
            actor = ray.get_actor(name, namespace=f"rayrl-{run.dir.name}")
        except ValueError:  # not created yet
            time.sleep(0.05)
            continue
        return ray.get(actor.__ray_call__.remote(lambda self: os.getpid()))
