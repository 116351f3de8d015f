"""Calls made in the same event-loop turn go out as one call over a list: the episodes of one decode
batch finish together, so their reward and buffer hand-overs cost one actor round trip, not one each."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any


class Coalescer:
    def __init__(self, send: Callable[[list], Awaitable[list]]) -> None:
        """send: items -> one result per item, in order (a remote call taking a list)."""
        self.send = send
        self.pending: list[tuple[Any, asyncio.Future]] = []

    async def __call__(self, item: Any) -> Any:
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self.pending.append((item, future))
        if len(self.pending) == 1:  # the first of this turn: flush after the others have queued
            loop.call_soon(lambda: asyncio.ensure_future(self._flush()))
        return await future

    async def _flush(self) -> None:
        batch, self.pending = self.pending, []
        try:
            results = await self.send([item for item, _ in batch])
        except Exception as err:  # noqa: BLE001 - every caller of the batch gets the error
            for _, future in batch:
                if not future.done():
                    future.set_exception(err)
            return
        for (_, future), result in zip(batch, results):
            if not future.done():
                future.set_result(result)
