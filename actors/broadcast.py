"""WeightBroadcaster: owns the weight-sync group, the policy version and its timing.

One sync: pause rollout engines (in-flight requests kept) -> learner streams packed buckets ->
rollout engines load them -> resume at version v+1 -> the buffer admits against v+1.
"""

from __future__ import annotations

import time

import ray

from rayrl.config import Config
from rayrl.engines.transport.base import GroupInfo
from rayrl.engines.transport.topology import topology
from rayrl.placement import node_address
from rayrl.types import WeightVersion


@ray.remote(num_cpus=0)
class WeightBroadcaster:
    def __init__(self, cfg: Config, learner_group, rollouts: list, buffer=None, version: int = 0) -> None:
        """buffer: told each new version (None when no buffer gates admission, as in checks)."""
        self.cfg, self.learners, self.rollouts, self.buffer = cfg, learner_group, rollouts, buffer
        self.version = version
        self.plan = None

    def setup(self) -> dict:
        """Create the sync group (learner rank 0 = rank 0, on its node) and agree on the bucket plan."""
        addr, port = ray.get(node_address.options(scheduling_strategy=self.learners.rank0_strategy).remote())
        topo = topology(ray.get([w.sync_ranks.remote() for w in self.rollouts]))
        info = lambda rank: GroupInfo(addr, port, topo.world_size, rank, self.cfg.sync.timeout_s)  # noqa: E731
        ray.get([self.learners.rank0.init_weight_sync.remote(info(0))]
                + [w.init_weight_transfer.remote(info(r)) for w, r in zip(self.rollouts, topo.first_ranks)])
        self.plan = ray.get(self.learners.rank0.weight_plan.remote(int(self.cfg.sync.bucket_mb * 2**20)))
        return {"tensors": self.plan.n_tensors, "bytes": self.plan.n_bytes, "buckets": len(self.plan.buckets)}

    def sync(self) -> WeightVersion:
        """Push the learner's weights to every rollout worker as version v+1, then tell the buffer."""
        return self.publish(self.version + 1)

    def current_version(self) -> int:
        return self.version

    def publish(self, version: int) -> WeightVersion:
        """Push the learner's weights labelled `version` (sync() after a step; a resumed run's restored
        version once at start), then tell the buffer."""
        if self.plan is None:
            raise RuntimeError("WeightBroadcaster.sync before setup()")
        t0 = time.perf_counter()
        ray.get([w.begin_weight_update.remote() for w in self.rollouts])
        ray.get(self.learners.send_weights(self.plan) + [w.receive_weights.remote(self.plan) for w in self.rollouts])
        ray.get([w.end_weight_update.remote(version) for w in self.rollouts])
        seconds = time.perf_counter() - t0
        self.version = version
        if self.buffer is not None:
            ray.get(self.buffer.set_version.remote(version))
        return WeightVersion(version, self.plan.n_tensors, self.plan.n_bytes, seconds)
