"""The trajectory buffer's bookkeeping, without Ray: the prompt queue, the prompts each rollout worker holds
(its leases), the finished groups waiting to be trained, and the ledger that accounts for every group.
The TrajectoryBuffer actor wraps it with an asyncio condition (who waits for what) and the object store.

Every produced group ends in exactly one place of the ledger:
produced = trained + waiting + failed + dropped_stale + equal_rewards + rejected.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import msgspec

from rayrl.config import RewardConfig, RolloutConfig
from rayrl.progress import EQUAL, REJECTED, UNSCORED, ProgressLimits, ProgressWatch, stall_reason
from rayrl.staleness import StalenessManager
from rayrl.types import GroupMeta, Task


class Ledger(msgspec.Struct):
    """Group counts since the run began (a resumed run continues its checkpoint's)."""

    produced: int = 0  # groups that came back from a workflow, whatever became of them
    trained: int = 0  # handed to the learner in a batch
    failed: int = 0  # could not be scored; the prompt is generated again
    dropped_stale: int = 0  # finished past the staleness bound; the prompt is generated again
    equal_rewards: int = 0  # dynamic sampling: every sample had the same reward
    rejected: int = 0  # the workflow returned None for the task
    requeued: int = 0  # prompts given back to the queue (a dead worker's, a failed group's)
    late: int = 0  # hand-overs for a lease the worker no longer held (declared dead, its prompts requeued): dropped

    def balanced(self, waiting: int) -> bool:
        """Every produced group is trained, waiting, or counted as dropped for one reason."""
        return self.produced == (self.trained + waiting + self.failed + self.dropped_stale + self.equal_rewards
                                 + self.rejected)


class Waiting(msgspec.Struct):
    """A finished group waiting for a batch: where it is (its place in the object store, rayrl.group_refs),
    what it is."""

    ref: Any
    meta: GroupMeta
    task: Task


class BufferState:
    def __init__(self, batch_size: int, max_staleness: int, version: int = 0, ledger: Ledger | None = None,
                 drop_equal_rewards: bool = False, limits: ProgressLimits | None = None) -> None:
        """version / ledger: where a resumed run stands (its trained groups count as accepted). drop_equal_rewards:
        dynamic sampling, groups whose rewards are all equal are not kept. limits: when a run that cannot progress
        stops (default: the config's defaults at this batch size)."""
        self.progress = ProgressWatch(limits or ProgressLimits.of(RolloutConfig(batch_size=batch_size), RewardConfig()))
        self.ledger = ledger or Ledger()
        self.staleness = StalenessManager(batch_size, max_staleness, version, self.ledger.trained)
        self.drop_equal_rewards = drop_equal_rewards
        self.prompts: deque[Task] = deque()
        self.leases: dict[int, dict[str, Task]] = {}  # rollout worker -> the prompts it is generating
        self.lease_lives: dict[str, int] = {}  # leased task id -> the life of the worker it was leased to
        self.lives: dict[int, int] = {}  # rollout worker -> its current life (restarts so far)
        self.items: deque[Waiting] = deque()
        self.dropped: list[str] = []  # task ids dropped (equal rewards) or rejected, until the driver asks
        self.dropped_rewards = [0.0, 0]  # their samples' reward sum and count, until the driver asks

    # ---- prompts in, leases out ---------------------------------------------------------------
    def feed(self, tasks: list[Task]) -> None:
        self.prompts.extend(tasks)

    def can_lease(self) -> bool:
        return bool(self.prompts) and self.staleness.capacity() > 0

    def is_old_life(self, worker: int, life: int) -> bool:
        """A call from a life of the worker that has since died must not lease prompts nobody generates."""
        return life != self.lives.get(worker, 0)

    def retire(self, worker: int) -> None:
        """The worker is leaving (a drained node): its waiting take returns []; what it holds stays leased to it
        until its episodes finish or requeue() gives the rest back."""
        self.lives[worker] = self.lives.get(worker, 0) + 1

    def lease(self, worker: int, n: int, life: int = 0) -> list[Task]:
        """Up to n queued prompts to the worker (in its life `life`), as many as staleness admits."""
        granted = self.staleness.try_admit(min(n, len(self.prompts)))
        tasks = [self.prompts.popleft() for _ in range(granted)]
        self.leases.setdefault(worker, {}).update((t.id, t) for t in tasks)
        self.lease_lives.update((t.id, life) for t in tasks)
        return tasks

    def holds(self, worker: int, task_id: str, life: int = 0) -> bool:
        """The fence: only the life of the worker that holds a prompt's lease may hand its group over. A worker
        declared dead (its prompts requeued) that still runs, or an earlier life of a restarted one, holds none."""
        return task_id in self.leases.get(worker, {}) and self.lease_lives.get(task_id) == life

    def late(self, worker: int, task_id: str) -> str:
        """A hand-over that failed the fence: dropped and counted (the prompt's group comes from its holder now);
        returns what to log."""
        self.ledger.late += 1
        return (f"rollout worker {worker} handed over task {task_id!r} without holding its lease (declared dead and "
                f"its prompts requeued, or an earlier life): dropped, {self.ledger.late} late so far")

    def _release(self, worker: int, task_id: str) -> Task | None:
        self.lease_lives.pop(task_id, None)
        return self.leases.get(worker, {}).pop(task_id, None)

    def requeue(self, worker: int, task_ids: list[str] | None = None, life: int | None = None) -> int:
        """The worker died (None: all its leased prompts; a new life begins) or some of its calls failed (those
        ids, held by its life `life` when given): those prompts go back to the front of the queue."""
        if task_ids is None:
            self.lives[worker] = self.lives.get(worker, 0) + 1
        held = self.leases.get(worker, {})
        ids = list(held) if task_ids is None else [
            i for i in task_ids if i in held and (life is None or self.lease_lives.get(i) == life)]
        tasks = [self._release(worker, i) for i in ids]
        self._give_back(tasks)
        return len(tasks)

    def _give_back(self, tasks: list[Task]) -> None:
        for t in reversed(tasks):
            self.prompts.appendleft(t)
            self.staleness.on_reject()
        self.ledger.requeued += len(tasks)

    # ---- finished groups in --------------------------------------------------------------------
    def equal_rewards(self, rewards: list[float]) -> bool:
        return self.drop_equal_rewards and len(set(rewards)) <= 1

    def drop_equal(self, worker: int, task_id: str, rewards: list[float]) -> None:
        """Dynamic sampling drops the group: counted, its slot goes to a further prompt."""
        self._release(worker, task_id)
        self.staleness.on_reject()
        self.ledger.produced += 1
        self.ledger.equal_rewards += 1
        self.progress.untrainable(EQUAL, f"all {rewards[0]:g}" if rewards else "no samples")
        self.dropped.append(task_id)
        self.dropped_rewards = [self.dropped_rewards[0] + sum(rewards), self.dropped_rewards[1] + len(rewards)]

    def accept(self, worker: int, ref: Any, meta: GroupMeta, task: Task) -> None:
        self._release(worker, meta.task_id)
        self.staleness.on_accept()
        self.progress.trainable()
        self.items.append(Waiting(ref, meta, task))
        self.ledger.produced += 1

    def reject(self, worker: int, task_id: str) -> None:
        """The workflow returned None: counted, its slot goes to a further prompt, never generated again."""
        self._release(worker, task_id)
        self.staleness.on_reject()
        self.ledger.produced += 1
        self.ledger.rejected += 1
        self.progress.untrainable(REJECTED, task_id)
        self.dropped.append(task_id)

    def fail(self, worker: int, task_id: str, why: str = "") -> None:
        """A group could not be scored (why: what the reward left unscored): counted, its prompt generated again."""
        task = self._release(worker, task_id)
        self.ledger.produced += 1
        self.ledger.failed += 1
        self.progress.untrainable(UNSCORED, why or f"task {task_id}")
        if task is not None:
            self._give_back([task])

    # ---- batches out -----------------------------------------------------------------------------
    def no_progress(self, n: int, now: float) -> str | None:
        """Why a batch of n can never come (ProgressWatch), or None while it still may."""
        s = self.staleness
        stall = stall_reason(n, len(self.items), s.running, len(self.prompts), s.capacity(), s.version,
                             s.max_staleness, s.batch_size, s.accepted)
        return self.progress.verdict(stall, now)

    def drop_stale(self) -> int:
        """Groups past the staleness bound go back to the queue as prompts (counted); returns how many."""
        stale = [w for w in self.items if self.staleness.too_old(w.meta.version)]
        if stale:
            self.items = deque(w for w in self.items if not self.staleness.too_old(w.meta.version))
            for w in stale:
                self.staleness.on_drop()
                self.prompts.appendleft(w.task)
                self.ledger.dropped_stale += 1
        return len(stale)

    def take_batch(self, n: int) -> list[Waiting]:
        """The n oldest groups (by policy version, then arrival); the caller checked len(items) >= n."""
        ordered = sorted(self.items, key=lambda w: w.meta.version)  # stable: arrival order within a version
        out, self.items = ordered[:n], deque(ordered[n:])
        self.ledger.trained += n
        self.progress.served()
        return out

    def take_dropped(self) -> tuple[list[str], float, int]:
        ids, (total, n) = self.dropped, self.dropped_rewards
        self.dropped, self.dropped_rewards = [], [0.0, 0]
        return ids, total, n

    def restore(self, waiting: list[Waiting]) -> None:
        """A checkpoint's finished groups, oldest first (the ledger already counts them)."""
        for w in waiting:
            self.staleness.accepted += 1
            self.items.append(w)

    def stats(self) -> dict:
        s = self.staleness
        return {"version": s.version, "accepted": s.accepted, "running": s.running, "waiting": len(self.items),
                "queued": len(self.prompts), "leased": sum(len(v) for v in self.leases.values()),
                "leased_by_worker": {w: len(v) for w, v in self.leases.items() if v},
                **msgspec.structs.asdict(self.ledger)}
