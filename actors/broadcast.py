"""WeightBroadcaster: owns the weight-sync group, the policy version and its timing.

One sync: pause rollout engines (in-flight requests kept) -> learner streams packed buckets ->
rollout engines load them -> resume at version v+1.
"""

from __future__ import annotations

import time

import ray

from rayrl.config import Config
from rayrl.engines.transport.base import GroupInfo
from rayrl.types import WeightVersion


@ray.remote(num_cpus=0)
class WeightBroadcaster:
    def __init__(self, cfg: Config, learner_group, rollouts: list) -> None:
        self.cfg, self.learners, self.rollouts = cfg, learner_group, rollouts
        self.plan = None

    def setup(self) -> dict:
        """Create the sync group (learner rank 0 = rank 0) and agree on the bucket plan."""
        addr, port = ray.get(self.learners.rank0.weight_sync_address.remote())
        ranks = ray.get([w.sync_ranks.remote() for w in self.rollouts])  # vLLM: one per tensor-parallel shard
        offsets = [1 + sum(ranks[:i]) for i in range(len(ranks))]
        world = 1 + sum(ranks)
        info = lambda rank: GroupInfo(addr, port, world, rank, self.cfg.sync.timeout_s)  # noqa: E731
        ray.get([self.learners.rank0.init_weight_sync.remote(info(0))]
                + [w.init_weight_transfer.remote(info(off)) for w, off in zip(self.rollouts, offsets)])
        self.plan = ray.get(self.learners.rank0.weight_plan.remote(int(self.cfg.sync.bucket_mb * 2**20)))
        return {"tensors": self.plan.n_tensors, "bytes": self.plan.n_bytes, "buckets": len(self.plan.buckets)}

    def sync(self, version: int) -> WeightVersion:
        if self.plan is None:
            raise RuntimeError("WeightBroadcaster.sync before setup()")
        t0 = time.perf_counter()
        ray.get([w.begin_weight_update.remote() for w in self.rollouts])
        ray.get(self.learners.send_weights(self.plan) + [w.receive_weights.remote(self.plan) for w in self.rollouts])
        ray.get([w.end_weight_update.remote(version) for w in self.rollouts])
        return WeightVersion(version, self.plan.n_tensors, self.plan.n_bytes, time.perf_counter() - t0)
