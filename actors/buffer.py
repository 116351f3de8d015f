"""TrajectoryBuffer: the actor around rayrl.buffer.BufferState. It owns the finished groups in the object store
(a dead rollout worker loses none), wakes whoever waits for a lease, a batch or a low prompt queue, and
publishes the buffer's gauges; the bookkeeping itself is BufferState's."""

from __future__ import annotations

import asyncio
import logging
import time

import msgspec
import ray

from rayrl.buffer import BufferState, Ledger, Waiting
from rayrl.group_refs import put_groups
from rayrl.metrics import RayMetrics
from rayrl.progress import NoProgress, ProgressLimits
from rayrl.types import GroupMeta, Task, TrajectoryGroup

log = logging.getLogger("rayrl")


@ray.remote(num_cpus=0)
class TrajectoryBuffer:
    def __init__(self, batch_size: int, max_staleness: int, version: int = 0, ledger: Ledger | None = None,
                 drop_equal_rewards: bool = False, limits: ProgressLimits | None = None) -> None:
        """version / ledger: where a resumed run stands. drop_equal_rewards: dynamic sampling. limits: when get_batch
        gives up on a batch that can never come (rayrl.progress)."""
        self.state = BufferState(batch_size, max_staleness, version, ledger, drop_equal_rewards, limits)
        self.changed = asyncio.Condition()
        self.closed = False
        self.metrics = RayMetrics("buffer", "buffer", {}, {
            "buffer_groups_waiting": "finished groups not trained yet", "buffer_prompts_queued": "prompts not leased yet",
            "buffer_prompts_leased": "prompts being generated", "buffer_version": "policy version admission counts from",
            **{f"buffer_{k}": f"groups {k} so far" for k in Ledger.__struct_fields__}})

    def _changed(self) -> None:
        """Gauges for the dashboard after every change, and wake every waiter."""
        stats, m = self.state.stats(), self.metrics
        m.set("buffer_groups_waiting", stats["waiting"])
        m.set("buffer_prompts_queued", stats["queued"])
        m.set("buffer_prompts_leased", stats["leased"])
        m.set("buffer_version", stats["version"])
        for k in Ledger.__struct_fields__:
            m.set(f"buffer_{k}", stats[k])
        self.changed.notify_all()

    # ---- prompts in, leases out ------------------------------------------------------------
    async def feed(self, tasks: list[Task]) -> None:
        async with self.changed:
            self.state.feed(tasks)
            self._changed()

    async def take(self, worker: int, n: int, life: int = 0) -> list[Task]:
        """Wait until a group may start and a prompt is queued; lease up to n prompts to the worker.
        [] means the buffer closed, or the call came from a life of the worker that has since died."""
        s = self.state
        async with self.changed:
            await self.changed.wait_for(lambda: self.closed or s.is_old_life(worker, life) or s.can_lease())
            if self.closed or s.is_old_life(worker, life):
                return []
            tasks = s.lease(worker, n, life)
            self._changed()
            return tasks

    async def requeue(self, worker: int, task_ids: list[str] | None = None, life: int | None = None) -> int:
        """The worker died (all its leased prompts) or one of its calls failed (task_ids, leased to its life `life`):
        back to the queue."""
        async with self.changed:
            n = self.state.requeue(worker, task_ids, life)
            self._changed()
            return n

    async def retire(self, worker: int) -> None:
        """A worker leaving the fleet takes no more prompts; its leases stay until its episodes end or requeue()."""
        async with self.changed:
            self.state.retire(worker)
            self._changed()

    async def wait_prompts_below(self, n: int) -> int:
        """Returns once fewer than n prompts are queued (or the buffer closed): the driver feeds more."""
        async with self.changed:
            await self.changed.wait_for(lambda: self.closed or len(self.state.prompts) < n)
            return len(self.state.prompts)

    # ---- scored groups in, batches out -------------------------------------------------------
    async def put(self, worker: int, group: TrajectoryGroup, meta: GroupMeta) -> None:
        """A scored group, by value: the buffer puts it into the object store itself and so owns it."""
        await self.put_many(worker, [(group, meta)])

    async def put_many(self, worker: int, items: list[tuple[TrajectoryGroup, GroupMeta]], life: int = 0) -> list[None]:
        """put() for groups a worker finished together: one round trip, and the ones kept share one object. Only
        the life of the worker holding a prompt's lease hands its group over; any other is late (dropped, counted)."""
        rewards = [[s.reward for s in group.samples] for group, _ in items]
        kept = [not self.state.equal_rewards(r) for r in rewards]
        places = iter(put_groups([group for (group, _), keep in zip(items, kept) if keep]))
        async with self.changed:
            for (group, meta), r, keep in zip(items, rewards, kept):
                place = next(places) if keep else None
                if self._fenced(worker, meta.task_id, life):
                    continue
                if keep:
                    self.state.accept(worker, place, meta, group.task)
                else:
                    self.state.drop_equal(worker, meta.task_id, r)
            self._changed()
        return [None] * len(items)

    def _fenced(self, worker: int, task_id: str, life: int) -> bool:
        """True when the caller does not hold the prompt's lease: its hand-over is dropped and counted as late."""
        if self.state.holds(worker, task_id, life):
            return False
        log.warning(self.state.late(worker, task_id))
        return True

    async def reject(self, worker: int, task_id: str, life: int = 0) -> None:
        async with self.changed:
            if not self._fenced(worker, task_id, life):
                self.state.reject(worker, task_id)
            self._changed()

    async def fail(self, worker: int, task_id: str, why: str = "", life: int = 0) -> None:
        async with self.changed:
            if not self._fenced(worker, task_id, life):
                self.state.fail(worker, task_id, why)
            self._changed()

    async def get_batch(self, n: int) -> list[tuple[list, GroupMeta]]:
        """The n oldest groups, as places in the object store (rayrl.group_refs), once n are within the staleness
        bound. Groups past it are not trained: counted as dropped_stale and their prompts generated again. Raises
        NoProgress once the batch can never come (rayrl.progress says why), checked at least once a second."""
        async with self.changed:
            while True:
                try:  # woken by every change; the watch's clock needs a look at least once a second as well
                    await asyncio.wait_for(self.changed.wait_for(lambda: len(self.state.items) >= n or self.closed or
                                                                 self.state.no_progress(n, time.monotonic())), 1.0)
                except asyncio.TimeoutError:
                    pass
                if self.state.drop_stale():
                    self._changed()
                if len(self.state.items) >= n or self.closed:
                    break
                if why := self.state.no_progress(n, time.monotonic()):
                    raise NoProgress(why)
            if len(self.state.items) < n:
                raise RuntimeError(f"buffer closed with {len(self.state.items)} of {n} groups")
            out = self.state.take_batch(n)
            self._changed()
            return [(w.ref, w.meta) for w in out]

    async def take_dropped(self) -> tuple[list[str], float, int]:
        """Task ids dropped for equal rewards or rejected since the last call, with the dropped samples'
        reward sum and count (the step's sampled reward counts them)."""
        return self.state.take_dropped()

    async def set_version(self, version: int) -> None:
        async with self.changed:
            self.state.staleness.set_version(version)
            self._changed()

    # ---- checkpoint and end ------------------------------------------------------------------
    async def snapshot(self) -> tuple[list[tuple[list, GroupMeta]], Ledger]:
        """The finished, untrained groups (places in the object store) and the ledger, taken at one instant (for a
        checkpoint)."""
        async with self.changed:
            return [(w.ref, w.meta) for w in self.state.items], msgspec.structs.replace(self.state.ledger)

    async def restore(self, groups: list[TrajectoryGroup]) -> None:
        """Put a checkpoint's finished groups back, oldest first (the ledger already counts them)."""
        async with self.changed:
            self.state.restore([Waiting(place, GroupMeta(g.task.id, g.min_version, "checkpoint"), g.task)
                                for g, place in zip(groups, put_groups(groups))])
            self._changed()

    async def close(self) -> int:
        """Stop admitting and wake every waiter; returns how many finished groups were never used."""
        async with self.changed:
            self.closed = True
            self._changed()
            return len(self.state.items)

    async def stats(self) -> dict:
        return self.state.stats()

    async def ping(self) -> bool:
        return True
