"""Score a trajectory group with a reward function under a per-sample timeout.

An exception or a timeout becomes reward 0 with a status and reason: never a crash, never a drop.
A timed-out call keeps its thread until it returns (Python cannot kill threads); the pool bounds them.
"""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

from rayrl.rewards.registry import RewardFn, as_result
from rayrl.types import TrajectoryGroup


class GroupScorer:
    def __init__(self, fn: RewardFn, timeout_s: float, max_threads: int) -> None:
        self.fn = fn
        self.timeout_s = timeout_s
        self.pool = ThreadPoolExecutor(max_workers=max_threads, thread_name_prefix="reward")
        self.counts: Counter[str] = Counter()

    def _call(self, sample, task):
        return as_result(self.fn(sample, task))

    def score(self, group: TrajectoryGroup) -> TrajectoryGroup:
        futures = [self.pool.submit(self._call, s, group.task) for s in group.samples]
        for sample, fut in zip(group.samples, futures):
            try:
                result = fut.result(timeout=self.timeout_s)
                sample.reward, sample.reward_status, sample.reward_reason = result.reward, "ok", result.reason
            except FutureTimeout:
                fut.cancel()
                sample.reward, sample.reward_status = 0.0, "timeout"
                sample.reward_reason = f"reward function took longer than {self.timeout_s}s"
            except Exception as err:  # noqa: BLE001 - any failure of user code becomes a counted zero
                sample.reward, sample.reward_status = 0.0, "error"
                sample.reward_reason = f"{type(err).__name__}: {err}"
            self.counts[sample.reward_status] += 1
        return group
