"""ThreadBudget: on CPU the learner and the rollout workers share a node's cores. Each step the learner ranks
take the cores that the rollout workers on their node did not keep busy while the learner last trained, so the
learner is not held to its bundle's share while generation waits (η = 0, or short answers), nor crowds one that
generates beside it: a worker busy over a quarter of that time keeps its core (measured on 2 cores: a learner
on both, beside a worker generating 44 % of the time, stepped in 0.19 s; on one, 0.15 s). The cores are those
the run reserved on that node (its learner and rollout bundles), never more than the node has."""

from __future__ import annotations

import math
import time

import ray


HELD_BELOW = 0.25  # a worker's busy share of one core it does not keep (rounded up from there)


class ThreadBudget:
    def __init__(self, system) -> None:
        nodes, plan = system.placement.nodes(), system.placement
        here = nodes["learner"][0]  # learner rank 0's node; ranks elsewhere get the same budget
        self.rollouts = [w for w, node in zip(system.rollouts, nodes["rollout"]) if node == here]
        self.ranks = sum(node == here for node in nodes["learner"])  # learner ranks sharing those cores
        self.per_rollout = plan.threads("rollout")
        reserved = plan.threads("learner") * self.ranks + self.per_rollout * len(self.rollouts)
        self.cores = min(ray.get(system.learners.rank0.cores.remote()), reserved)
        self.since, self.busy = time.perf_counter(), None
        self.last = self._share(self.per_rollout * len(self.rollouts))

    def _busy_s(self) -> float | None:
        """The rollout workers' seconds with a request in the engine so far, summed (None: one could not say)."""
        try:
            return sum(s["busy_s"] for s in ray.get([w.stats.remote() for w in self.rollouts]))
        except ray.exceptions.RayError:  # a worker restarting: keep the last budget
            return None

    def _share(self, busy_cores: float) -> int:
        """Each learner rank's threads: the cores left, split between the ranks on the node (at least one)."""
        return max(1, (self.cores - math.ceil(busy_cores - HELD_BELOW)) // self.ranks)

    def next(self) -> int:
        """Threads for the coming step (its training starts now)."""
        self.since, self.busy = time.perf_counter(), self._busy_s()
        return self.last

    def trained(self) -> None:
        """The step's training ended: the workers' busy cores over it set the next step's threads."""
        now, busy = time.perf_counter(), self._busy_s()
        if busy is not None and self.busy is not None and now > self.since:
            self.last = self._share(self.per_rollout * max(0.0, busy - self.busy) / (now - self.since))
