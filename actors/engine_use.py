"""EngineUse: a rollout worker's bookkeeping of its engine. Calls inside the engine (a colocated sleep waits for
them to finish, and new ones wait while the engine sleeps), requests in flight (a gauge), the time the engine had
any request (gen_s), and the samples and tokens it made (counters)."""

from __future__ import annotations

import asyncio
import threading
import time

from rayrl.types import Sample

POLL_S = 0.005  # how often a waiting engine call or a draining sleep looks again


class EngineUse:
    def __init__(self, metrics, totals: dict) -> None:
        """metrics: the worker's RayMetrics; totals: its run totals (gen_s, samples and tokens are added here)."""
        self.metrics, self.totals = metrics, totals
        # cleared while the engine sleeps; the control methods run on another thread, hence a threading.Event
        # and a plain count of the calls inside the engine
        self.awake, self.calls = threading.Event(), 0
        self.awake.set()
        self.requests, self.busy_since = 0, 0.0

    async def enter(self, n_requests: int) -> None:
        """Count this call in, unless the engine sleeps: then wait for it to wake (checked after counting, so a
        sleep either sees this call and waits for it, or this call sees the sleep)."""
        while True:
            self.calls += 1
            if self.awake.is_set():
                break
            self.calls -= 1
            await asyncio.sleep(POLL_S)
        if self.calls == 1:
            self.busy_since = time.perf_counter()
        self._requests(n_requests)

    def leave(self, n_requests: int, samples: list[Sample] | None) -> None:
        self._requests(-n_requests)
        self.calls -= 1
        if self.calls == 0:
            self.totals["gen_s"] += time.perf_counter() - self.busy_since
        if samples:
            n_tokens = sum(len(s.completion_ids) for s in samples)
            self.totals["samples"] += len(samples)
            self.totals["tokens"] += n_tokens
            self.metrics.inc("rollout_aborted_total", sum(s.finish_reason == "abort" for s in samples))
            self.metrics.inc("rollout_samples_total", len(samples))
            self.metrics.inc("rollout_tokens_total", n_tokens)

    def busy_s(self) -> float:
        """Seconds the engine had a request so far, the period running now included."""
        return self.totals["gen_s"] + (time.perf_counter() - self.busy_since if self.calls else 0.0)

    def _requests(self, delta: int) -> None:
        self.requests += delta
        self.metrics.set("rollout_requests_in_flight", self.requests)

    async def drain(self) -> None:
        """Close the door to new calls and wait for those inside to finish (before the engine sleeps)."""
        self.awake.clear()
        while self.calls:
            await asyncio.sleep(POLL_S)
