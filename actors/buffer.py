"""TrajectoryBuffer: the prompt queue, the leases of prompts being generated, and the refs of scored
groups; admits new rollouts by the staleness rule. Prompts a dead rollout worker held go back to the
front of the queue, and its counts stay balanced:
produced = trained + waiting + failed + dropped_stale + equal_rewards + rejected (by the workflow)."""

from __future__ import annotations

import asyncio
from collections import deque

import ray

from rayrl.metrics import RayMetrics
from rayrl.staleness import StalenessManager
from rayrl.types import GroupMeta, Task, TrajectoryGroup


@ray.remote(num_cpus=0)
class TrajectoryBuffer:
    def __init__(self, batch_size: int, max_staleness: int, version: int = 0, ledger: dict | None = None,
                 drop_equal_rewards: bool = False) -> None:
        """version / ledger: where a resumed run stands (its trained groups count as accepted).
        drop_equal_rewards: dynamic sampling, groups whose rewards are all equal are not kept."""
        self.ledger = {"produced": 0, "trained": 0, "failed": 0, "dropped_stale": 0, "equal_rewards": 0,
                       "requeued": 0, "rejected": 0, **(ledger or {})}
        self.drop_equal_rewards = drop_equal_rewards
        self.dropped: list[str] = []  # task ids dropped (equal rewards) or rejected, until the driver asks
        self.dropped_rewards = [0.0, 0]  # their samples' reward sum and count, until the driver asks
        accepted = self.ledger["trained"]
        self.manager = StalenessManager(batch_size, max_staleness, version, accepted)
        self.prompts: deque[Task] = deque()
        self.leases: dict[int, dict[str, Task]] = {}  # rollout worker -> the prompts it is generating
        self.lives: dict[int, int] = {}  # rollout worker -> its current life (restarts so far)
        self.items: deque[tuple[ray.ObjectRef, GroupMeta, Task]] = deque()  # finished, scored groups
        self.changed = asyncio.Condition()
        self.closed = False
        self.metrics = RayMetrics("buffer", "buffer", {}, {
            "buffer_groups_waiting": "finished groups not trained yet", "buffer_prompts_queued": "prompts not leased yet",
            "buffer_prompts_leased": "prompts being generated", "buffer_version": "policy version admission counts from",
            **{f"buffer_{k}": f"groups {k} so far" for k in self.ledger}})

    def _publish(self) -> None:
        """Gauges for the dashboard after every change, and wake every waiter."""
        m = self.metrics
        m.set("buffer_groups_waiting", len(self.items))
        m.set("buffer_prompts_queued", len(self.prompts))
        m.set("buffer_prompts_leased", sum(len(v) for v in self.leases.values()))
        m.set("buffer_version", self.manager.version)
        for k, v in self.ledger.items():
            m.set(f"buffer_{k}", v)
        self.changed.notify_all()

    # ---- prompts in, leases out ------------------------------------------------------------
    async def feed(self, tasks: list[Task]) -> None:
        async with self.changed:
            self.prompts.extend(tasks)
            self._publish()

    async def take(self, worker: int, n: int, life: int = 0) -> list[Task]:
        """Wait until a group may start and a prompt is queued; lease up to n prompts to the worker.
        [] means the buffer closed, or the call came from a life of the worker that has since died (a
        dead worker's pending call must not lease prompts nobody will generate)."""
        def stale() -> bool:
            return life != self.lives.get(worker, 0)

        async with self.changed:
            await self.changed.wait_for(lambda: self.closed or stale() or (self.prompts and self.manager.capacity() > 0))
            if self.closed or stale():
                return []
            granted = self.manager.try_admit(min(n, len(self.prompts)))
            tasks = [self.prompts.popleft() for _ in range(granted)]
            self.leases.setdefault(worker, {}).update((t.id, t) for t in tasks)
            return tasks

    async def requeue(self, worker: int, task_ids: list[str] | None = None) -> int:
        """The worker died (all its leased prompts) or one of its calls failed (task_ids): those prompts
        go back to the front of the queue."""
        async with self.changed:
            if task_ids is None:  # a new life begins: calls still pending from the old one lease nothing
                self.lives[worker] = self.lives.get(worker, 0) + 1
            held = self.leases.get(worker, {})
            ids = list(held) if task_ids is None else [i for i in task_ids if i in held]
            tasks = [held.pop(i) for i in ids]
            self._give_back(tasks)
            return len(tasks)

    def _give_back(self, tasks: list[Task]) -> None:
        for t in reversed(tasks):
            self.prompts.appendleft(t)
            self.manager.on_reject()
        self.ledger["requeued"] += len(tasks)
        self._publish()

    # ---- scored groups in, batches out -------------------------------------------------------
    async def put(self, worker: int, group: TrajectoryGroup, meta: GroupMeta) -> None:
        """A scored group, by value: the buffer puts it into the object store itself and so owns it,
        and it outlives the rollout worker that made it (the learners fetch it by ref)."""
        if self.drop_equal_rewards and len({s.reward for s in group.samples}) <= 1:
            async with self.changed:
                self.leases.get(worker, {}).pop(meta.task_id, None)
                self.manager.on_reject()  # its slot goes to a further prompt
                self.ledger["produced"] += 1
                self.ledger["equal_rewards"] += 1
                self.dropped.append(meta.task_id)
                self.dropped_rewards[0] += sum(s.reward for s in group.samples)
                self.dropped_rewards[1] += len(group.samples)
                self._publish()
            return
        ref = ray.put(group)
        async with self.changed:
            self.leases.get(worker, {}).pop(meta.task_id, None)
            self.manager.on_accept()
            self.items.append((ref, meta, group.task))
            self.ledger["produced"] += 1
            self._publish()

    async def put_many(self, worker: int, items: list[tuple[TrajectoryGroup, GroupMeta]]) -> list[None]:
        """put() for groups a worker finished together: one round trip."""
        return [await self.put(worker, group, meta) for group, meta in items]

    async def reject(self, worker: int, task_id: str) -> None:
        """The workflow returned None for the task: counted, its slot goes to a further prompt, and it is
        not generated again."""
        async with self.changed:
            self.leases.get(worker, {}).pop(task_id, None)
            self.manager.on_reject()
            self.ledger["produced"] += 1
            self.ledger["rejected"] += 1
            self.dropped.append(task_id)
            self._publish()

    async def wait_prompts_below(self, n: int) -> int:
        """Returns once fewer than n prompts are queued (or the buffer closed): the driver feeds more
        right away rather than on its next check."""
        async with self.changed:
            await self.changed.wait_for(lambda: self.closed or len(self.prompts) < n)
            return len(self.prompts)

    async def fail(self, worker: int, task_id: str) -> None:
        """A group came back but could not be scored: counted, and its prompt is generated again."""
        async with self.changed:
            task = self.leases.get(worker, {}).pop(task_id, None)
            self.ledger["produced"] += 1
            self.ledger["failed"] += 1
            if task is not None:
                self._give_back([task])

    async def get_batch(self, n: int) -> list[tuple[list[ray.ObjectRef], GroupMeta]]:
        """The n oldest groups (by policy version, then arrival), as wrapped refs, once n are ready.
        A group that finished too late to be within the staleness bound (a slow reward, a restarted
        actor) is not trained: it is counted as dropped_stale and its prompt generated again."""
        async with self.changed:
            while True:
                await self.changed.wait_for(lambda: len(self.items) >= n or self.closed)
                self._drop_stale()
                if len(self.items) >= n or self.closed:
                    break
            if len(self.items) < n:
                raise RuntimeError(f"buffer closed with {len(self.items)} of {n} groups")
            ordered = sorted(self.items, key=lambda item: item[1].version)  # stable: arrival order within a version
            out, rest = ordered[:n], ordered[n:]
            self.items = deque(rest)
            self.ledger["trained"] += n
            self._publish()
            return [([ref], meta) for ref, meta, _ in out]

    def _drop_stale(self) -> None:
        m = self.manager
        stale = [item for item in self.items if m.version - item[1].version > m.max_staleness]
        if not stale:
            return
        self.items = deque(item for item in self.items if m.version - item[1].version <= m.max_staleness)
        for _ref, _meta, task in stale:
            m.on_drop()
            self.prompts.appendleft(task)
            self.ledger["dropped_stale"] += 1
        self._publish()

    async def take_dropped(self) -> tuple[list[str], float, int]:
        """Task ids dropped for equal rewards or rejected since the last call (the driver stops tracking
        them), with the dropped samples' reward sum and count (the sampled reward counts them)."""
        ids, (total, n) = self.dropped, self.dropped_rewards
        self.dropped, self.dropped_rewards = [], [0.0, 0]
        return ids, total, n

    async def set_version(self, version: int) -> None:
        async with self.changed:
            self.manager.set_version(version)
            self._publish()

    # ---- checkpoint and end ------------------------------------------------------------------
    async def snapshot(self) -> tuple[list[tuple[list[ray.ObjectRef], GroupMeta]], dict]:
        """The finished, untrained groups and the ledger, taken at one instant (for a checkpoint)."""
        async with self.changed:
            return [([ref], meta) for ref, meta, _ in self.items], dict(self.ledger)

    async def restore(self, groups: list[TrajectoryGroup]) -> None:
        """Put a checkpoint's finished groups back, oldest first (the ledger already counts them)."""
        async with self.changed:
            for g in groups:
                self.manager.accepted += 1
                self.items.append((ray.put(g), GroupMeta(g.task.id, g.min_version, "checkpoint"), g.task))
            self._publish()

    async def close(self) -> int:
        """Stop admitting and wake every waiter; returns how many finished groups were never used."""
        async with self.changed:
            self.closed = True
            self._publish()
            return len(self.items)

    async def stats(self) -> dict:
        m = self.manager
        return {"version": m.version, "accepted": m.accepted, "running": m.running, "waiting": len(self.items),
                "queued": len(self.prompts), "leased": sum(len(v) for v in self.leases.values()), **self.ledger}
