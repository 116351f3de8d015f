"""BatchedCalls: one engine call at a time; the requests that arrive while it runs go together into the next one,
so the samples of many groups and many callers share a call. Each caller gets its own slice back, or the engine's
error. Used by the served models' actors (reward models, teachers)."""

from __future__ import annotations

import asyncio
import time
from typing import Awaitable, Callable


class BatchedCalls:
    def __init__(self, engine_call: Callable[[list], Awaitable[list]]) -> None:
        """engine_call: requests -> one result per request, in order."""
        self.engine_call = engine_call
        self.lock = asyncio.Lock()
        self.pending: list[tuple[list, asyncio.Future]] = []
        self.calls, self.items, self.busy_s = 0, 0, 0.0  # engine calls, requests served, seconds in them

    async def __call__(self, requests: list) -> list:
        future = asyncio.get_running_loop().create_future()
        self.pending.append((requests, future))
        async with self.lock:  # whoever holds the engine next serves everything queued by then
            if not future.done():
                batch, self.pending = self.pending, []
                await self._serve(batch)
        return await future

    async def _serve(self, batch: list[tuple[list, asyncio.Future]]) -> None:
        flat = [r for requests, _ in batch for r in requests]
        start = time.perf_counter()
        try:
            results = await self.engine_call(flat)
        except Exception as err:  # noqa: BLE001 - every caller in the batch gets the engine's error
            for _, future in batch:
                future.set_exception(err)
            return
        finally:
            self.busy_s += time.perf_counter() - start
        self.calls, self.items = self.calls + 1, self.items + len(flat)
        i = 0
        for requests, future in batch:
            future.set_result(results[i:i + len(requests)])
            i += len(requests)
