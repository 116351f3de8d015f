"""ThreadBudget: on CPU the learner and the rollout workers share a node's cores. Each step the learner ranks
take the cores that the rollout workers on their node did not keep busy in the step before, so the learner is
not held to its bundle's share while generation leaves cores idle (short answers), nor crowds a busy one. The
cores are those the run reserved on that node (its learner and rollout bundles), never more than the node has."""

from __future__ import annotations

import time

import ray


class ThreadBudget:
    def __init__(self, system) -> None:
        nodes, plan = system.placement.nodes(), system.placement
        here = nodes["learner"][0]  # learner rank 0's node; ranks elsewhere get the same budget
        self.rollouts = [w for w, node in zip(system.rollouts, nodes["rollout"]) if node == here]
        self.ranks = sum(node == here for node in nodes["learner"])  # learner ranks sharing those cores
        self.per_rollout = plan.threads("rollout")
        reserved = plan.threads("learner") * self.ranks + self.per_rollout * len(self.rollouts)
        self.cores = min(ray.get(system.learners.rank0.cores.remote()), reserved)
        self.since, self.busy = time.perf_counter(), self._busy_s()
        self.last = self._share(self.per_rollout * len(self.rollouts))

    def _busy_s(self) -> float | None:
        """The rollout workers' seconds with a request in the engine so far, summed (None: one could not say)."""
        try:
            return sum(s["busy_s"] for s in ray.get([w.stats.remote() for w in self.rollouts]))
        except ray.exceptions.RayError:  # a worker restarting: keep the last budget
            return None

    def _share(self, busy_cores: float) -> int:
        """Each learner rank's threads: the cores left, split between the ranks on the node (at least one)."""
        return max(1, (self.cores - round(busy_cores)) // self.ranks)

    def next(self) -> int:
        """Threads for the coming step: the cores less the workers' busy cores over the last step."""
        now, busy = time.perf_counter(), self._busy_s()
        if busy is not None and self.busy is not None and now > self.since:
            self.last = self._share(self.per_rollout * max(0.0, busy - self.busy) / (now - self.since))
        self.since, self.busy = now, busy
        return self.last
