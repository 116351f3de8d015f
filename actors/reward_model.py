"""RewardModelActor: a frozen judge or scorer (rayrl.engines.reward) serving the reward actors. One engine call
at a time; the requests that arrive while it runs go together into the next one, so samples of many groups and
many reward actors share a call."""

from __future__ import annotations

import os

import ray

from rayrl import components
from rayrl.batched_calls import BatchedCalls
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
        self.calls = BatchedCalls(self.model.score)
        self.requests, self.unparsable, self.counted_calls = 0, 0, 0
        self.metrics = RayMetrics("reward_model", f"reward-model-{index}", COUNTERS)

    async def score(self, requests: list[ScoreRequest]) -> list[ModelScore]:
        """A score per request, in order; waits for the engine call it joined."""
        self.requests += 1
        self.metrics.inc("reward_model_requests_total")
        scores = await self.calls(requests)
        unparsable = sum(s.score is None for s in scores)
        self.unparsable += unparsable
        self.metrics.inc("reward_model_samples_total", len(scores))
        self.metrics.inc("reward_model_unparsable_total", unparsable)
        self.metrics.inc("reward_model_engine_calls_total", self.calls.calls - self.counted_calls)
        self.counted_calls = self.calls.calls
        return scores

    def stats(self) -> dict:
        """Totals since this process started (a restart begins again at zero), and its pid."""
        c = self.calls
        return {"requests": self.requests, "samples": c.items, "engine_calls": c.calls, "unparsable": self.unparsable,
                "busy_s": c.busy_s, "pid": os.getpid()}

    def health(self) -> bool:
        return True
