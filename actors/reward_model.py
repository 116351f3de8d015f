"""RewardModelActor: a frozen judge or scorer (rayrl.engines.reward) serving the reward actors. One engine call
at a time; the requests that arrive while it runs go together into the next one, so samples of many groups and
many reward actors share a call."""

from __future__ import annotations

import asyncio
import os
import time

import ray

from rayrl import components
from rayrl.config import Config
from rayrl.metrics import RayMetrics
from rayrl.types import ModelScore, ScoreRequest

COUNTERS = {"reward_model_requests_total": "calls from reward actors", "reward_model_samples_total": "samples scored",
            "reward_model_engine_calls_total": "batched engine calls", "reward_model_unparsable_total":
            "samples whose verdicts did not parse"}


@ray.remote(num_cpus=0)
class RewardModelActor:
    def __init__(self, cfg: Config, model_path: str, index: int = 0, num_threads: int = 1,
                 search_path: list[str] | None = None) -> None:
        """Also what a restart runs: the model comes back from model_path (it is never synced)."""
        self.model = components.reward_model(cfg, model_path, num_threads, search_path)
        self.lock = asyncio.Lock()
        self.pending: list[tuple[list[ScoreRequest], asyncio.Future]] = []
        self.totals = {"requests": 0, "samples": 0, "engine_calls": 0, "unparsable": 0, "busy_s": 0.0}
        self.metrics = RayMetrics("reward_model", f"reward-model-{index}", COUNTERS)

    async def score(self, requests: list[ScoreRequest]) -> list[ModelScore]:
        """A score per request, in order; waits for the engine call it joined."""
        future = asyncio.get_running_loop().create_future()
        self.pending.append((requests, future))
        self.totals["requests"] += 1
        self.metrics.inc("reward_model_requests_total")
        async with self.lock:  # whoever holds the engine next serves everything queued by then
            if not future.done():
                batch, self.pending = self.pending, []
                await self._serve(batch)
        return await future

    async def _serve(self, batch: list[tuple[list[ScoreRequest], asyncio.Future]]) -> None:
        flat = [r for requests, _ in batch for r in requests]
        start = time.perf_counter()
        try:
            scores = await self.model.score(flat)
        except Exception as err:  # noqa: BLE001 - every caller in the batch gets the engine's error
            for _, future in batch:
                future.set_exception(err)
            return
        finally:
            self.totals["busy_s"] += time.perf_counter() - start
        unparsable = sum(s.score is None for s in scores)
        self.totals.update(samples=self.totals["samples"] + len(flat), engine_calls=self.totals["engine_calls"] + 1,
                           unparsable=self.totals["unparsable"] + unparsable)
        for key, n in (("samples", len(flat)), ("engine_calls", 1), ("unparsable", unparsable)):
            self.metrics.inc(f"reward_model_{key}_total", n)
        i = 0
        for requests, future in batch:
            future.set_result(scores[i:i + len(requests)])
            i += len(requests)

    def stats(self) -> dict:
        """Totals since this process started (a restart begins again at zero), and its pid."""
        return {**self.totals, "pid": os.getpid()}

    def health(self) -> bool:
        return True
