"""RankGroup: N rank actors of one role (learner-<r>, critic-<r>), one per placement bundle of the role, their
default process group met at rank 0's node. Calls fan out to every rank; a rank that fails raises
LearnerFailed at once, since the others may be waiting for it in a collective."""

from __future__ import annotations

import ray

from rayrl.faults import LearnerFailed, wait_all
from rayrl.placement import node_address


class RankGroup:
    def __init__(self, worker_cls, role: str, n: int, placement, namespace: str | None, *args) -> None:
        """Each rank is worker_cls(rank, n, *args, threads, master), master the process group's rendezvous."""
        self.rank0_strategy = placement.actor_options(role, 0)["scheduling_strategy"]
        master = ray.get(node_address.options(scheduling_strategy=self.rank0_strategy).remote())
        self.names = [f"{role}-{r}" for r in range(n)]
        self.workers = [worker_cls.options(name=self.names[r], namespace=namespace, **placement.actor_options(role, r))
                        .remote(r, n, *args, placement.threads(role), master) for r in range(n)]

    @property
    def rank0(self):
        return self.workers[0]

    def _all(self, refs: list[ray.ObjectRef], what: str) -> list:
        return wait_all(refs, self.names, what, failure=LearnerFailed)

    def save(self, path: str) -> None:
        self._all([w.save.remote(path) for w in self.workers], f"{self.names[0]} save")

    def load(self, path: str) -> None:
        self._all([w.load.remote(path) for w in self.workers], f"{self.names[0]} load")

    def dead_ranks(self, timeout_s: float = 5.0) -> list[int]:
        """Ranks whose actor is dead (a busy rank that does not answer within timeout_s counts as alive)."""
        refs = [w.ping.remote() for w in self.workers]
        ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
        dead = []
        for r, ref in enumerate(refs):
            try:
                ray.get(ref, timeout=0)
            except ray.exceptions.RayActorError:
                dead.append(r)
            except ray.exceptions.GetTimeoutError:
                pass
        return dead

    def kill(self) -> None:
        for w in self.workers:
            ray.kill(w)
