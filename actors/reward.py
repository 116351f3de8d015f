"""RewardActor: scores groups on CPU with timeouts; failures become counted zero rewards. Calls from
several rollout episodes are served at once (threads; the trainer sets max_concurrency), so a step's
last groups do not queue behind each other."""

from __future__ import annotations

from collections import Counter

import ray

from rayrl.config import Config
from rayrl.metrics import RayMetrics
from rayrl.rewards.registry import load_reward_fn
from rayrl.rewards.scoring import FAILURES, GroupScorer
from rayrl.types import TrajectoryGroup

DESCRIPTIONS = {"ok": "samples scored", "error": "reward function raised", "timeout": "reward function timed out",
                "non_finite": "reward function returned NaN or inf", "wrong_type": "reward function returned a non-number"}


@ray.remote(num_cpus=0)
class RewardActor:
    def __init__(self, cfg: Config, index: int = 0, search_path: list[str] | None = None) -> None:
        """search_path: where reward.fn's module may live besides sys.path (the driver's working directory)."""
        r = cfg.reward
        self.scorer = GroupScorer(load_reward_fn(r.fn, search_path), r.timeout_s, r.max_threads, r.failure_window)
        self.metrics = RayMetrics("reward", f"reward-{index}",
                                  {f"reward_{k}_total": DESCRIPTIONS[k] for k in ("ok", *FAILURES)})

    def score(self, group: TrajectoryGroup) -> TrajectoryGroup:
        scored = self.scorer.score(group)
        for status, n in Counter(s.reward_status for s in scored.samples).items():
            self.metrics.inc(f"reward_{status}_total", n)
        return scored

    def score_many(self, groups: list[TrajectoryGroup]) -> list[TrajectoryGroup]:
        """Several groups in one call (a rollout worker's groups that finished together)."""
        return [self.score(g) for g in groups]

    def stats(self) -> dict:
        """Counts by status, the recent window's failures, the first messages of each failure reason."""
        return self.scorer.stats()
