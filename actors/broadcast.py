"""WeightBroadcaster: owns the weight-sync group, the policy version and its timing.

One sync: pause rollout engines (in-flight requests kept) -> learner streams packed buckets ->
rollout engines load them and resume at version v, the learner's step count -> the buffer admits against v
(a loop that syncs every K steps publishes versions K, 2K, ...: rollout.max_staleness counts learner steps). A collective
transport (gloo, nccl) sends and receives at once; with ipc the learner readies its weights (packs them, or
in place only waits for its device) while the engines pause, then the receivers read them through its handles.
Each part must finish within sync.timeout_s, or the sync fails naming the actors that did not.
"""

from __future__ import annotations

import time

import ray

from rayrl.config import Config
from rayrl.engines.registry import transport_plan
from rayrl.engines.transport.base import GroupInfo
from rayrl.engines.transport.topology import topology
from rayrl.faults import LearnerFailed, RolloutFailed, wait_all
from rayrl.placement import node_address
from rayrl.types import WeightVersion


@ray.remote(num_cpus=0)
class WeightBroadcaster:
    def __init__(self, cfg: Config, learner_group, rollouts: list, buffer=None, version: int = 0) -> None:
        """buffer: told each new version (None when no buffer gates admission, as in checks)."""
        self.cfg, self.learners, self.rollouts, self.buffer = cfg, learner_group, rollouts, buffer
        self.version = version
        self.plan = None
        self.collective = transport_plan(cfg.sync.transport).collective
        self.names = [f"rollout-{i}" for i in range(len(rollouts))]

    def setup(self) -> dict:
        """Create the sync group (learner rank 0 = rank 0, on its node) and agree on the bucket plan."""
        addr, port, key = ray.get(node_address.options(scheduling_strategy=self.learners.rank0_strategy).remote())
        topo = topology(ray.get([w.sync_ranks.remote() for w in self.rollouts]))
        info = lambda rank: GroupInfo(addr, port, topo.world_size, rank, self.cfg.sync.timeout_s, key)  # noqa: E731
        wait_all([self.learners.rank0.init_weight_sync.remote(info(0))]
                 + [w.init_weight_transfer.remote(info(r)) for w, r in zip(self.rollouts, topo.first_ranks)],
                 ["learner-0", *self.names], "forming the weight-sync group", self.cfg.sync.timeout_s,
                 [LearnerFailed] + [RolloutFailed] * len(self.rollouts))
        self.plan = ray.get(self.learners.rank0.weight_plan.remote(int(self.cfg.sync.bucket_mb * 2**20)))
        model_bytes = ray.get(self.learners.rank0.model_bytes.remote())
        return {"tensors": self.plan.n_tensors, "bytes": self.plan.n_bytes, "buckets": len(self.plan.buckets),
                "share_of_model": self.plan.n_bytes / model_bytes}

    def sync(self) -> WeightVersion:
        """Push the learner's weights to every rollout worker labelled with its step count, then tell the buffer."""
        version = wait_all([self.learners.rank0.version.remote()], self.learners.names[:1], "reading the version",
                           self.cfg.sync.timeout_s, LearnerFailed)[0]  # a rank that died since its step: failover
        return self.publish(version)

    def rejoin(self) -> WeightVersion:
        """After a rollout worker restarted: form the sync group anew with every worker and push the
        current weights again (same version), so the restarted one generates nothing older."""
        self.setup()
        return self.publish(self.version)

    def set_learners(self, learner_group) -> None:
        """The learner group after failover started it anew; the next rejoin() forms the sync group with it."""
        self.learners = learner_group

    def set_rollouts(self, rollouts: list, names: list[str]) -> None:
        """The rollout workers after one joined or left; the next rejoin() forms the sync group with them."""
        self.rollouts, self.names = list(rollouts), list(names)

    def current_version(self) -> int:
        return self.version

    def publish(self, version: int) -> WeightVersion:
        """Push the learner's weights labelled `version` (sync() after a step; a resumed run's restored
        version once at start), then tell the buffer."""
        if self.plan is None:
            raise RuntimeError("WeightBroadcaster.sync before setup()")
        t0, timeout_s = time.perf_counter(), self.cfg.sync.timeout_s
        pausing = [w.begin_weight_update.remote() for w in self.rollouts]
        # ipc: the learner readies its weights while the engines pause; a collective send waits for the pause,
        # so that a worker that fails to pause leaves no learner blocked in the group
        sends = None if self.collective else self.learners.send_weights()  # the plan weight_plan() made
        hold = wait_all(pausing, self.names, "pausing for a weight sync", timeout_s, RolloutFailed)[0]
        paused_s = time.perf_counter() - t0
        what = f"weight sync to version {version}"
        if self.collective:  # each worker resumes as soon as its own part has arrived
            wait_all(self.learners.send_weights(self.plan)
                     + [w.receive_weights.remote(self.plan, version) for w in self.rollouts],
                     self.learners.names + self.names, what, timeout_s,
                     [LearnerFailed] * len(self.learners.names) + [RolloutFailed] * len(self.names))
        else:  # the handles go from the learner's call straight into the receivers' (no stop here between)
            receiving = [w.receive_weights.remote(sends[0], version) for w in self.rollouts]
            wait_all(sends, self.learners.names, what, timeout_s, LearnerFailed)
            wait_all(receiving, self.names, what, timeout_s, RolloutFailed)
        seconds = time.perf_counter() - t0
        self.version = version
        if self.buffer is not None:
            ray.get(self.buffer.set_version.remote(version))
        return WeightVersion(version, self.plan.n_tensors, self.plan.n_bytes, seconds, paused_s, hold)
