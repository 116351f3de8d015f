"""ThreadBudget: on CPU the learner and the rollout workers share a node's cores. Each step the learner ranks
take the cores that the rollout workers on their node did not keep busy in the step before, so the learner is
not held to its bundle's share while generation leaves cores idle (short answers), nor crowds a busy one."""

from __future__ import annotations

import time

import ray


class ThreadBudget:
    def __init__(self, system, threads_per_rollout: int) -> None:
        self.cores = ray.get(system.learners.rank0.cores.remote())
        nodes = system.placement.nodes()
        self.rollouts = [w for w, node in zip(system.rollouts, nodes["rollout"]) if node == nodes["learner"][0]]
        self.per_rollout = threads_per_rollout
        self.since, self.busy = time.perf_counter(), self._busy_s()
        self.last = max(1, self.cores - self.per_rollout * len(self.rollouts))

    def _busy_s(self) -> float | None:
        """The rollout workers' seconds with a request in the engine so far, summed (None: one could not say)."""
        try:
            return sum(s["busy_s"] for s in ray.get([w.stats.remote() for w in self.rollouts]))
        except ray.exceptions.RayError:  # a worker restarting: keep the last budget
            return None

    def next(self) -> int:
        """Threads for the coming step: the cores less the workers' busy cores over the last step."""
        now, busy = time.perf_counter(), self._busy_s()
        if busy is not None and self.busy is not None and now > self.since:
            busy_cores = self.per_rollout * (busy - self.busy) / (now - self.since)
            self.last = max(1, self.cores - round(busy_cores))
        self.since, self.busy = now, busy
        return self.last
