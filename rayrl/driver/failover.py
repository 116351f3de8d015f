"""LearnerFailover: a learner (or critic) rank that dies does not end the run. After every
learner.failover_every_steps steps each rank copies its training state into its own memory and its right
neighbour's; when a rank dies, both groups start anew from the newest step every rank's copy survives, the
batches trained since are trained again from their object refs (still held here), and the weight-sync group
re-forms around the new rank 0. When a copy died with its holders, CopiesLost says so and the trainer falls back to
the last checkpoint on disk."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import ray

from rayrl.config import LearnerConfig
from rayrl.faults import LearnerFailed

log = logging.getLogger("rayrl")


class CopiesLost(RuntimeError):
    """No step every rank's copy survived: the run falls back to its last checkpoint on disk."""


@dataclass
class Recovery:
    """One recovery, as the summary lists it."""

    failed_at_step: int
    dead: dict[str, list[int]]  # role -> its dead ranks
    restored_step: int
    retrained_steps: list[int]
    retrained_equal: bool  # every retrained step's loss equal to the first time's, bit for bit
    seconds: float


class LearnerFailover:
    def __init__(self, system, lc: LearnerConfig, apply: Callable[[list], dict], timeout_s: float) -> None:
        """apply(refs): one training step of the learner (and critic) on a batch, its stats (the loop's own)."""
        self.system, self.lc, self.apply, self.timeout_s = system, lc, apply, timeout_s
        self.groups = [g for g in (system.learners, system.critics) if g is not None]
        self.trained: list[tuple[int, list, float]] = []  # (step, batch refs, loss) since the confirmed copy
        self.confirmed = 0  # the newest step whose copies reached every holder
        self.pending: tuple[int, list[ray.ObjectRef]] | None = None
        self.recoveries: list[Recovery] = []

    def start(self, step: int) -> None:
        """Copies of the state the loop starts from (step 0, or the checkpoint it resumed)."""
        self.confirmed = step
        self.pending = (step, [ref for g in self.groups for ref in g.take_copies(step, step)])

    def trained_step(self, step: int, refs: list, stats: dict) -> None:
        """After a step's report: remember its batch; every failover_every_steps, copies of the state after it."""
        self.trained.append((step, refs, stats.get("loss")))
        self._confirm()
        if step % self.lc.failover_every_steps == 0:
            self.pending = (step, [ref for g in self.groups for ref in g.take_copies(step, self.confirmed)])

    def _confirm(self) -> None:
        """The pending copies, once every hand-over succeeded, become the confirmed ones."""
        if self.pending is None or ray.wait(self.pending[1], num_returns=len(self.pending[1]), timeout=0)[1]:
            return
        step, refs = self.pending
        self.pending = None
        try:
            ray.get(refs)
        except ray.exceptions.RayError:  # a rank died while copying: the confirmed copies stay the ones to use
            return
        self.confirmed = step
        self.trained = [t for t in self.trained if t[0] > step]

    def recover(self, err: LearnerFailed, step: int) -> None:
        """After a rank died at `step`: the groups re-formed at the newest recoverable copy, the steps since
        trained again, the weight-sync group formed anew. Re-raises err when no rank died (a failure that
        restarting cannot mend), CopiesLost when a copy is gone."""
        t0 = time.perf_counter()
        dead = {g.names[0].split("-")[0]: g.dead_ranks() for g in self.groups}
        if not any(dead.values()):
            raise err
        if len(self.recoveries) >= self.lc.failover_max_recoveries:
            raise LearnerFailed(f"{_who(dead)} died at step {step} after {len(self.recoveries)} recoveries "
                                f"(learner.failover_max_recoveries)", err.name) from err
        found = {}
        for g in self.groups:  # ranks found dead while their copies are listed join the dead
            role = g.names[0].split("-")[0]
            found[role], dead[role] = g.recoverable(dead[role])
        who = _who(dead)
        steps = set.intersection(*(set(f) for f in found.values()))
        if not steps:
            raise CopiesLost(f"{who} died at step {step} and the in-memory copy of a rank died with its holders")
        back = max(steps)
        cause = (str(err).strip().splitlines() or [""])[-1][:300]  # the failure, without a remote traceback
        log.warning("%s died at step %d (%s); re-forming the group from the copies of step %d", who, step, cause, back)
        for g, holders in zip(self.groups, found.values()):
            g.reform(back, g.copies_of(back, holders[back]), self.timeout_s)
        again = [t for t in self.trained if t[0] > back]
        equal = all(self.apply(refs).get("loss") == loss for _, refs, loss in again)
        ray.get(self.system.broadcaster.set_learners.remote(self.system.learners))
        ray.get(self.system.broadcaster.rejoin.remote())
        self.trained, self.confirmed, self.pending = again, back, None
        rec = Recovery(step, dead, back, [s for s, _, _ in again], equal, time.perf_counter() - t0)
        self.recoveries.append(rec)
        log.warning("recovered in %.1f s: restored step %d, trained steps %s again (losses %s)", rec.seconds, back,
                    rec.retrained_steps or "none", "equal" if equal else "NOT equal to the first time's")

    def summary(self) -> list[dict]:
        return [asdict(r) for r in self.recoveries]


def _who(dead: dict[str, list[int]]) -> str:
    """'learner rank 0, 1' for the dead ranks of each role."""
    return ", ".join(f"{role} rank {', '.join(map(str, ranks))}" for role, ranks in dead.items() if ranks)
