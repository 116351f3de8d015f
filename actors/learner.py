"""LearnerWorker (one per rank) and LearnerGroup, which fans calls out to every rank and gathers."""

from __future__ import annotations

import socket

import ray

from rayrl.batching import batch_stats, collate
from rayrl.config import Config
from rayrl.engines.registry import LEARNER_BACKENDS, WEIGHT_TRANSPORTS, resolve
from rayrl.engines.transport.base import BucketPlan, GroupInfo, TensorSpec, plan_buckets
from rayrl.types import GroupMeta, TrajectoryGroup


@ray.remote
class LearnerWorker:
    def __init__(self, rank: int, world_size: int, cfg: Config, model_path: str, num_threads: int) -> None:
        self.rank, self.world_size, self.cfg = rank, world_size, cfg
        self.backend = resolve(LEARNER_BACKENDS, cfg.learner.backend, "learner.backend")(cfg, model_path, num_threads)
        self.pad_id = self.backend.tokenizer.pad_token_id
        self.transport = None

    def train(self, items: list[tuple[list[ray.ObjectRef], GroupMeta]]) -> dict:
        """Fetch this rank's groups straight from the object store and take one training step."""
        groups: list[TrajectoryGroup] = ray.get([ref[0] for ref, _ in items])
        batch = collate(groups, self.pad_id)
        version = self.backend.version
        stats = {**batch_stats(batch, version), **self.backend.train_step(batch)}
        stats["version"] = self.backend.version
        return stats

    def completion_logprobs(self, groups: list[TrajectoryGroup]) -> list[list[float]]:
        """Per sample, the learner's log-probs of its completion tokens (to check against rollout)."""
        batch = collate(groups, self.pad_id)
        logp = self.backend.compute_logprobs(batch)
        return [logp[i][batch.loss_mask[i] > 0].tolist() for i in range(logp.shape[0])]

    def weight_sync_address(self) -> tuple[str, int]:
        with socket.socket() as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
        return ray.util.get_node_ip_address(), port

    def weight_plan(self, bucket_bytes: int) -> BucketPlan:
        specs = [TensorSpec(n, tuple(t.shape), str(t.dtype).removeprefix("torch."))
                 for n, t in self.backend.named_full_weights()]
        return plan_buckets(specs, bucket_bytes)

    def init_weight_sync(self, group_info: GroupInfo) -> None:
        self.transport = resolve(WEIGHT_TRANSPORTS, self.cfg.sync.transport, "sync.transport")()
        self.transport.init(group_info)

    def send_weights(self, plan: BucketPlan) -> None:
        """Every rank walks its full weights in lockstep; rank 0 streams them to the rollout workers."""
        weights = self.backend.named_full_weights()
        if self.rank == 0:
            self.transport.send(weights, plan)
        else:
            for _ in weights:
                pass

    def save(self, path: str) -> None:
        self.backend.save(path)


class LearnerGroup:
    """N LearnerWorker actors, one per placement bundle, named learner-<rank>."""

    def __init__(self, cfg: Config, model_path: str, placement) -> None:
        n = cfg.learner.num_workers
        self.workers = [
            LearnerWorker.options(name=f"learner-{r}", **placement.actor_options("learner", r))
            .remote(r, n, cfg, model_path, placement.threads("learner"))
            for r in range(n)
        ]

    @property
    def rank0(self):
        return self.workers[0]

    def train(self, items: list) -> dict:
        """Shard the groups across ranks, train on all, return rank 0's stats."""
        n = len(self.workers)
        results = ray.get([w.train.remote(items[r::n]) for r, w in enumerate(self.workers)])
        return results[0]

    def send_weights(self, plan: BucketPlan) -> list[ray.ObjectRef]:
        return [w.send_weights.remote(plan) for w in self.workers]

    def save(self, path: str) -> None:
        ray.get([w.save.remote(path) for w in self.workers])
