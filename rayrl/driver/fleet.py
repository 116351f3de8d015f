"""RolloutFleet: the rollout workers' generation loops seen from the driver. It starts them, notices a worker
whose actor died, brings it back (its leased prompts requeued, the sync group formed anew, the current
weights loaded, its loop started again), lets workers join and leave a running job (rollout.fleet=elastic:
rayrl.driver.elastic decides when), evaluates on them, and stops them at the end. Workers are named by their
index (rollout-<index>), which a worker keeps while others come and go."""

from __future__ import annotations

import logging
import time

import ray

from rayrl.config import EvalConfig, RolloutConfig
from rayrl.driver.worker_table import RolloutSlot, RolloutTable
from rayrl.faults import LearnerFailed, RolloutFailed, RunStopped, wait_all
from rayrl.rewards.combine import measured_reward
from rayrl.types import Task, WeightVersion

log = logging.getLogger("rayrl")


class RolloutFleet:
    def __init__(self, system, rollout: RolloutConfig, sync_timeout_s: float) -> None:
        self.table: RolloutTable = system.rollout_table  # changed here only, through its methods
        self.buffer, self.broadcaster, self.gateway = system.buffer, system.broadcaster, system.gateway
        self.learners = system.learners
        self.cfg, self.sync_timeout_s = rollout, sync_timeout_s
        self.recoveries: list[dict] = []  # when each death was seen and how long bringing it back took
        self.retired: list[dict] = []  # the loop totals of workers that left
        self.lost: dict[int, dict] = {}  # workers that joined the running job and died: their remove() records

    @property
    def workers(self) -> list:
        return self.table.handles

    @property
    def loops(self) -> tuple:
        return tuple(s.loop for s in self.table.slots)

    @property
    def restarts(self) -> list[int]:
        return [s.restarts for s in self.table.slots]

    def start(self) -> None:
        for slot in self.table.slots:
            slot.loop = slot.handle.run.remote()

    # ---- faults ---------------------------------------------------------------------------------
    def dead(self) -> list[RolloutSlot]:
        """Workers whose loop ended by the actor's death; a loop that raised or returned early is an error."""
        slots = self.table.slots
        done, _ = ray.wait([s.loop for s in slots], num_returns=len(slots), timeout=0)
        out = []
        for slot in (s for s in slots if s.loop in done):
            try:
                ray.get(slot.loop)
            except ray.exceptions.RayActorError:
                out.append(slot)
                continue
            raise RolloutFailed(f"{slot.name}'s loop ended while training was still running", slot.name)
        return out

    def heal(self) -> bool:
        """Bring back every worker whose actor died (one that joined the running job leaves instead: its node
        may be gone); False if none had."""
        dead = self.dead()
        if not dead:
            return False
        for slot in [s for s in dead if s.joined]:
            self.lost[slot.index] = self.remove(slot.index, "lost")
        dead = [s for s in self.dead() if not s.joined]
        if not dead:
            return True
        seen_at, t0 = time.time(), time.perf_counter()
        requeued = {slot.index: ray.get(self.buffer.requeue.remote(slot.index)) for slot in dead}  # in the ledger
        deadline = time.monotonic() + self.cfg.restart_timeout_s
        for slot in dead:
            self._await_restart(slot, deadline)
        self._regroup()
        for slot in dead:
            slot.restarts += 1
            ray.get(slot.handle.mark_restart.remote(slot.restarts))
            slot.loop = slot.handle.run.remote()
            self.recoveries.append({"worker": slot.name, "seen_at": seen_at, "heal_s": time.perf_counter() - t0,
                                    "requeued": requeued[slot.index]})
            log.info("%s restarted (restart %d); rejoined at the current weights, its prompts requeued",
                     slot.name, slot.restarts)
        return True

    # ---- joining and leaving (rollout.fleet=elastic) --------------------------------------------------
    def join(self, index: int) -> None:
        """A worker started on a node that appeared: into the sync group at the current weights, then its loop."""
        slot = self.table.join(index)
        self._regroup()
        slot.loop = slot.handle.run.remote()
        log.info("%s joined (%d workers); it holds the current weights", slot.name, len(self.table.slots))

    def leave(self, index: int, deadline: float, why: str = "drained") -> dict:
        """A drained node's (or an idle) worker: it takes no more prompts and finishes what it holds until `deadline`
        (epoch seconds), then whatever it still holds goes back to the queue and it leaves the sync group."""
        slot = self.table.slot(index)
        ray.get([slot.handle.stop.remote(), self.buffer.retire.remote(index)])
        done, _ = ray.wait([slot.loop], timeout=max(0.0, deadline - time.time()))
        if done:
            try:
                self.retired.append(ray.get(slot.loop))
            except ray.exceptions.RayActorError:
                done = []
        return {**self.remove(index, why), "finished_in_time": bool(done)}

    def remove(self, index: int, why: str) -> dict:
        """Out of the fleet: the engine stopped, the actor gone, its leases requeued, the others regrouped."""
        slot = self.table.remove(index)
        ray.wait([slot.handle.shutdown.remote()], timeout=10)
        ray.kill(slot.handle)
        requeued = ray.get(self.buffer.requeue.remote(index))
        self._regroup()
        log.info("%s left (%s; %d prompts requeued); %d workers", slot.name, why, requeued, len(self.table.slots))
        return {"worker": slot.name, "why": why, "requeued": requeued, "at": time.time()}

    def _regroup(self) -> None:
        """The sync group formed anew with the current workers, every one loaded with the current weights."""
        ray.get(self.broadcaster.set_rollouts.remote(self.table.handles, self.table.names))
        ray.get(self.broadcaster.rejoin.remote())
        if self.gateway is not None:
            ray.get(self.gateway.set_workers.remote(self.workers))

    def _await_restart(self, slot: RolloutSlot, deadline: float) -> None:
        """Calls to a restarting actor fail at once (ActorUnavailableError): ask again until it answers."""
        late = RolloutFailed(f"{slot.name} did not come back within rollout.restart_timeout_s="
                             f"{self.cfg.restart_timeout_s:.0f}s", slot.name)
        while True:
            try:
                ray.get(slot.handle.health.remote(), timeout=max(0.1, deadline - time.monotonic()))
                return
            except ray.exceptions.ActorUnavailableError:
                if time.monotonic() > deadline:
                    raise late from None
                time.sleep(0.5)
            except ray.exceptions.ActorDiedError as err:
                raise RunStopped(f"{slot.name} died and cannot be restarted (rollout.max_restarts spent, or its "
                                 f"restart failed): {str(err).strip().splitlines()[-1][:300]}") from None
            except ray.exceptions.GetTimeoutError:
                raise late from None

    def sync(self) -> WeightVersion:
        """Weights to every rollout worker at the learner's step; a worker that failed the sync is brought back (or, one that
        joined, leaves) and the sync redone. A collective send fails on the learner too when a receiver dies
        mid-sync: that is retried only if a rollout worker died; otherwise the run cannot survive it."""
        try:
            return ray.get(self.broadcaster.sync.remote())
        except (RolloutFailed, LearnerFailed) as err:
            if isinstance(err, LearnerFailed) and self.learners.dead_ranks():
                raise
            ray.wait(list(self.loops), num_returns=1, timeout=self.sync_timeout_s)  # a dead worker's loop ends too
            if not self.dead():
                raise
            log.warning("weight sync failed (%s); restarting the rollout workers that died", err)
            self.heal()
            return ray.get(self.broadcaster.sync.remote())

    # ---- evaluation and the colocated phases ---------------------------------------------------------
    def evaluate(self, tasks: list[Task], e: EvalConfig, while_waiting, period_s: float) -> tuple[float, list]:
        """Held-out accuracy and the samples: the workflow's episodes spread over the workers; a sample counts at
        reward >= 1 (the rule's, when a reward model trains), a task the workflow rejects as failed.
        while_waiting() is called every period_s until it is done."""
        k = len(self.workers)
        refs = [w.evaluate.remote(tasks[i::k], e.samples_per_task, e.temperature) for i, w in enumerate(self.workers)]
        while ray.wait(refs, num_returns=len(refs), timeout=period_s)[1]:
            while_waiting()
        parts = ray.get(refs)
        samples = [s for part in parts for g in part for s in g.samples]
        successes = sum(measured_reward(s) >= 1.0 for s in samples)
        return successes / max(1, len(tasks) * e.samples_per_task), samples

    def sleep(self) -> dict:
        """Colocated: every engine gives the device to the learner (running requests finish first)."""
        drain_s = self.cfg.request_timeout_s + self.sync_timeout_s
        return wait_all([w.sleep.remote() for w in self.workers], self.table.names, "putting the rollout engines to sleep",
                        drain_s, RolloutFailed)[0]

    def sync_report(self) -> dict:
        """Colocated: the device's memory once the weights were written, and how the engine took them."""
        report = ray.get(self.workers[0].sync_report.remote())
        out = {"mem_sync_gb": report.get("mem_sync_gb", 0.0)}
        if "path" in report:
            out.update(sync_path=report["path"], sync_write_s=report["seconds"])
            if report.get("why"):  # why vLLM's load_weights took the weights instead of the direct write
                out["sync_path_why"] = report["why"]
            if "unequal_tensors" in report:  # bitwise mode: vLLM's rows against what the learner sent
                out.update(sync_unequal_tensors=report["unequal_tensors"], sync_unequal_names=report["unequal_names"])
            if "after_wake" in report:  # the same rows read again once the engine could generate
                out.update(sync_changed_after_wake=report["after_wake"]["changed_tensors"])
        return out

    def stop(self) -> tuple[dict, dict]:
        """Stop the loops and wake anything waiting on the buffer. Returns the workers' totals (summed, their
        workflows' counts merged) and the buffer's ledger with the groups never used."""
        ray.get([w.stop.remote() for w in self.workers])
        ray.get(self.buffer.close.remote())
        per_worker = ray.get(list(self.loops)) + self.retired  # each loop waits for its episodes still running
        workflow: dict[str, int] = {}
        for t in per_worker:
            for k, v in t.pop("workflow").items():
                workflow[k] = workflow.get(k, 0) + v
        totals = {k: sum(t[k] for t in per_worker) for k in per_worker[0]} | {"workflow": workflow}
        stats = ray.get(self.buffer.stats.remote())
        keys = ("produced", "trained", "failed", "dropped_stale", "equal_rewards", "rejected", "requeued", "late")
        return totals, {k: stats[k] for k in keys} | {"unused": stats["waiting"]}
