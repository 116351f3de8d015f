"""TrajectoryBuffer: holds object refs of scored groups and admits new rollouts by the staleness rule."""

from __future__ import annotations

import asyncio
from collections import deque

import ray

from rayrl.staleness import StalenessManager
from rayrl.types import GroupMeta


@ray.remote(num_cpus=0)
class TrajectoryBuffer:
    def __init__(self, batch_size: int, max_staleness: int, version: int = 0, accepted: int = 0) -> None:
        """version / accepted: where a resumed run stands (its trained groups count as accepted)."""
        self.manager = StalenessManager(batch_size, max_staleness, version, accepted)
        self.items: deque[tuple[ray.ObjectRef, GroupMeta]] = deque()
        self.changed = asyncio.Condition()
        self.closed = False

    async def admit(self, n: int) -> int:
        """Wait until at least one group may start; grant up to n. 0 means the buffer closed."""
        async with self.changed:
            await self.changed.wait_for(lambda: self.closed or self.manager.capacity() > 0)
            return 0 if self.closed else self.manager.try_admit(n)

    async def release(self, n: int) -> None:
        """Give back admitted slots that produced no group (no prompt came, or generation failed)."""
        async with self.changed:
            for _ in range(n):
                self.manager.on_reject()
            self.changed.notify_all()

    async def put(self, ref: list[ray.ObjectRef], meta: GroupMeta) -> None:
        """ref is wrapped in a list so Ray hands over the reference, not the data."""
        async with self.changed:
            self.manager.on_accept()
            self.items.append((ref[0], meta))
            self.changed.notify_all()

    async def get_batch(self, n: int) -> list[tuple[list[ray.ObjectRef], GroupMeta]]:
        """The n oldest groups, as wrapped refs, once n are ready; each within the staleness bound."""
        async with self.changed:
            await self.changed.wait_for(lambda: len(self.items) >= n or self.closed)
            if len(self.items) < n:
                raise RuntimeError(f"buffer closed with {len(self.items)} of {n} groups")
            out = [([ref], meta) for ref, meta in (self.items.popleft() for _ in range(n))]
            m = self.manager
            stale = [meta for _, meta in out if m.version - meta.version > m.max_staleness]
            if stale:  # admission control guarantees this never happens; training on them would be wrong
                raise RuntimeError(f"{len(stale)} groups exceed max_staleness={m.max_staleness} at version "
                                   f"{m.version}, e.g. task {stale[0].task_id} from version {stale[0].version}")
            return out

    async def set_version(self, version: int) -> None:
        async with self.changed:
            self.manager.set_version(version)
            self.changed.notify_all()

    async def close(self) -> int:
        """Stop admitting and wake every waiter; returns how many finished groups were never used."""
        async with self.changed:
            self.closed = True
            self.changed.notify_all()
            return len(self.items)

    async def stats(self) -> dict:
        m = self.manager
        return {"version": m.version, "accepted": m.accepted, "running": m.running, "waiting": len(self.items)}
