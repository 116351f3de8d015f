"""RankGroup: N rank actors of one role (learner-<r>, critic-<r>), one per placement bundle of the role, their
default process group met at rank 0's node. Calls fan out to every rank; a rank that fails raises
LearnerFailed at once, since the others may be waiting for it in a collective. With failover, each rank keeps a
copy of its training state and of its left neighbour's (StateCopies), and reform() starts the group anew."""

from __future__ import annotations

import time

import ray

from rayrl.faults import LearnerFailed, wait_all
from rayrl.placement import node_address


class RankGroup:
    def __init__(self, worker_cls, role: str, n: int, placement, namespace: str | None, *args) -> None:
        """Each rank is worker_cls(rank, n, *args, threads, master), master the process group's rendezvous."""
        self.rank0_strategy = placement.actor_options(role, 0)["scheduling_strategy"]
        self.names = [f"{role}-{r}" for r in range(n)]
        self._start = (worker_cls, role, placement, namespace, args)
        self.workers = self._started()

    def _started(self) -> list:
        """Every rank, met at a fresh rendezvous on rank 0's node (a new port and key: no rank of an earlier
        group can join it)."""
        worker_cls, role, placement, namespace, args = self._start
        master = ray.get(node_address.options(scheduling_strategy=self.rank0_strategy).remote())
        n = len(self.names)
        return [worker_cls.options(name=self.names[r], namespace=namespace, **placement.actor_options(role, r))
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

    # ---- failover: copies of the training state, and the group started anew from them ----------------
    def take_copies(self, step: int, keep_from: int) -> list[ray.ObjectRef]:
        """Every rank copies its state after `step` (collective) and hands it to its right neighbour; the refs of
        the hand-overs (not waited for: the copies overlap the next step's generation)."""
        n = len(self.workers)
        own = [w.take_copy.remote(step, keep_from) for w in self.workers]
        return [self.workers[(r + 1) % n].hold_copy.remote(r, step, own[r], keep_from) for r in range(n)]

    def recoverable(self, dead: list[int]) -> tuple[dict[int, list[int]], list[int]]:
        """Per step that can be restored, the live rank holding each rank's copy of it (its own, or its right
        neighbour's; a step whose copy of some rank died with its holders is left out); and the dead ranks, those
        found dead while asking included."""
        n = len(self.workers)
        held = {}
        for r in (r for r in range(n) if r not in dead):
            try:
                held[r] = ray.get(self.workers[r].copy_steps.remote())
            except ray.exceptions.RayActorError:  # died since dead_ranks() looked: its copies are gone too
                continue
        out = {}
        for step in sorted({s for h in held.values() for steps in h.values() for s in steps}):
            holders = [next((h for h in (r, (r + 1) % n) if step in held.get(h, {}).get(r, [])), None)
                       for r in range(n)]
            if None not in holders:
                out[step] = holders
        return out, [r for r in range(n) if r not in held]

    def copies_of(self, step: int, holders: list[int]) -> list[ray.ObjectRef]:
        """Each rank's copy of `step`, from the rank recoverable() named."""
        return [self.workers[h].copy_of.remote(r, step) for r, h in enumerate(holders)]

    def reform(self, step: int, copies: list[ray.ObjectRef], timeout_s: float) -> None:
        """Every rank killed and started anew at a new rendezvous, then loaded from the copies of `step` (the old
        ranks answer for them first; the copies stay in the object store, not fetched here)."""
        if ray.wait(copies, num_returns=len(copies), timeout=timeout_s, fetch_local=False)[1]:
            raise LearnerFailed(f"the copies of step {step} did not arrive within {timeout_s:.0f}s", self.names[0])
        for w in self.workers:
            ray.kill(w, no_restart=True)
        namespace = self._start[3]
        deadline = time.monotonic() + timeout_s
        for name in self.names:  # a killed actor's name is free once Ray has recorded its death
            while time.monotonic() < deadline:
                try:
                    ray.get_actor(name, namespace=namespace)
                except ValueError:
                    break
                time.sleep(0.1)
        self.workers = self._started()
        wait_all([w.restore_copy.remote(step, *copies) for w in self.workers], self.names,
                 f"{self.names[0].split('-')[0]} group re-forming at step {step}", timeout_s, LearnerFailed)
