"""RewardWatch: the reward actors' failures, counted by reason and written to reward_failures.json; a run
whose recent samples fail more than reward.max_failure_fraction is stopped naming the function, the reasons
and the first error, whether the driver is waiting for a batch or training."""

from __future__ import annotations

import ray

from rayrl.config import RewardConfig
from rayrl.faults import RunStopped
from rayrl.rewards.scoring import failing, merge_stats


class RewardWatch:
    def __init__(self, rewards: list, reward: RewardConfig, run_dir) -> None:
        self.rewards, self.cfg, self.run_dir = rewards, reward, run_dir

    def check(self) -> dict[str, int]:
        """Failed samples by reason so far; raises RunStopped once failures pass the bound."""
        stats = merge_stats(ray.get([a.stats.remote() for a in self.rewards]))
        path = self.run_dir.write_json("reward_failures.json", stats)
        if why := failing(stats, self.cfg.fn, self.cfg.max_failure_fraction, self.cfg.failure_window):
            raise RunStopped(f"{why}; details in {path}", exit_code=1)
        return {k: v for k, v in stats["counts"].items() if k != "ok"}
