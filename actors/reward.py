"""RewardActor: scores groups on CPU with timeouts; failures become counted zero rewards."""

from __future__ import annotations

import ray

from rayrl.config import Config
from rayrl.metrics import RayMetrics
from rayrl.rewards.registry import load_reward_fn
from rayrl.rewards.scoring import GroupScorer
from rayrl.types import TrajectoryGroup


@ray.remote(num_cpus=0)
class RewardActor:
    def __init__(self, cfg: Config, index: int = 0) -> None:
        r = cfg.reward
        self.scorer = GroupScorer(load_reward_fn(r.fn), r.timeout_s, r.max_threads)
        self.metrics = RayMetrics("reward", f"reward-{index}", {
            "reward_ok_total": "samples scored", "reward_error_total": "reward function raised",
            "reward_timeout_total": "reward function timed out"})

    def score(self, group: TrajectoryGroup) -> TrajectoryGroup:
        before = dict(self.scorer.counts)
        scored = self.scorer.score(group)
        for status in ("ok", "error", "timeout"):
            self.metrics.inc(f"reward_{status}_total", self.scorer.counts[status] - before.get(status, 0))
        return scored

    def stats(self) -> dict[str, int]:
        return dict(self.scorer.counts)
