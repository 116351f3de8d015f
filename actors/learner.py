"""LearnerWorker (one per rank) and LearnerGroup, which fans calls out to every rank and gathers."""

from __future__ import annotations

import os
import time
from datetime import timedelta

import ray
import torch
import torch.distributed as dist

from rayrl import components
from rayrl.batching import batch_stats, collate, completion_values, place_completion_values
from rayrl.config import Config
from rayrl.engines.device_memory import PeakMemory
from rayrl.engines.registry import transport_plan
from rayrl.engines.transport.base import BucketPlan, GroupInfo, TensorSpec, plan_buckets
from rayrl.group_refs import get_groups
from rayrl.image_refs import with_images
from rayrl.metrics import merge_rank_stats
from rayrl.actors.ranks import RankGroup
from rayrl.actors.state_copies import StateCopies
from rayrl.rendezvous import init_method
from rayrl.types import Batch, TrainResult, TrajectoryGroup


def init_process_group(cfg: Config, rank: int, world_size: int, master: tuple[str, int, str]) -> None:
    """A learner group's default process group, one per actor process: nccl on GPUs, gloo on CPU
    (weight sync has its own)."""
    gpu = cfg.cluster.n_gpus_per_node > 0 and torch.cuda.is_available()
    addr, port, key = master
    # DeepSpeed reads these; torch.distributed gets them explicitly below
    os.environ.update(MASTER_ADDR=addr, MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world_size),
                      LOCAL_RANK="0")
    if gpu:
        torch.cuda.set_device(0)  # Ray exposes exactly this rank's GPU
    dist.init_process_group("nccl" if gpu else "gloo", init_method=init_method(addr, port, key), rank=rank,
                            world_size=world_size, timeout=timedelta(seconds=cfg.learner.process_group_timeout_s))


def fetch_batch(refs: list[list], pad_id: int) -> tuple[list[TrajectoryGroup], Batch]:
    """A rank's groups straight from the object store (their places, rayrl.group_refs), collated."""
    groups = with_images(get_groups(refs))  # a task's images fetched once per group, not per sample
    return groups, collate(groups, pad_id)


@ray.remote
class LearnerWorker(StateCopies):
    def __init__(self, rank: int, world_size: int, cfg: Config, model_path: str, num_threads: int,
                 master: tuple[str, int, str] | None = None) -> None:
        self.rank, self.world_size, self.cfg = rank, world_size, cfg
        if cfg.learner.backend != "torch":
            init_process_group(cfg, rank, world_size, master)
        self.learner = components.learner(cfg, model_path, num_threads)
        self.state_owner, self.copies = self.learner, {}  # failover's copies (StateCopies)
        self.pad_id = self.learner.tokenizer.pad_token_id
        self.transport, self.plan = None, None
        self.last_send: dict[str, float] = {}  # rank 0: the last weight send's time, and its parts

    @ray.method(num_returns=2)
    def train(self, refs: list[list[ray.ObjectRef]], values: dict | None = None,
              threads: int | None = None) -> tuple[dict, dict | None]:
        """One training step on this rank's groups: its stats and (ppo) the returns the critic should learn, per task
        id like values, the critic's (two results: the returns stay in the object store for the critic's rank).
        threads: torch threads for this step (CPU), if the driver says."""
        if threads is not None:
            torch.set_num_threads(threads)
        groups, batch = fetch_batch(refs, self.pad_id)
        peak = PeakMemory()
        per_token = None if values is None else place_completion_values(batch, groups, values)
        stats = {**batch_stats(batch, self.learner.version), **self.learner.train_step(batch, per_token)}
        stats["version"] = self.learner.version
        stats["mem_train_gb"] = peak.peak_gb()  # the device's peak while this rank trained (0 on CPU)
        returns = self.learner.last_returns
        return stats, None if returns is None else completion_values(batch, returns, groups)

    def version(self) -> int:
        """The optimizer steps taken (a resumed run's included): the version its weights are published as."""
        return self.learner.version

    def completion_logprobs(self, groups: list[TrajectoryGroup]) -> list[list[float]]:
        """Per sample, the learner's log-probs of its completion tokens (to check against rollout)."""
        batch = collate(groups, self.pad_id)
        logp = self.learner.compute_logprobs(batch)
        return [logp[i][batch.loss_mask[i] > 0].tolist() for i in range(logp.shape[0])]

    def _on_the_wire(self, specs) -> list[TensorSpec]:
        """(name, shape, dtype) as they travel: in sync.dtype, or the learner's own."""
        wire = self.cfg.sync.dtype
        return [TensorSpec(n, shape, str(dtype).removeprefix("torch.") if wire == "learner" else wire)
                for n, shape, dtype in specs]

    def weight_plan(self, bucket_bytes: int) -> BucketPlan:
        """The tensors a sync sends, in send order (kept: send_weights uses it)."""
        self.plan = plan_buckets(self._on_the_wire(self.learner.weight_specs()), bucket_bytes)
        return self.plan

    def model_bytes(self) -> int:
        """A sync of every weight, in bytes on the wire (with LoRA a sync sends far less)."""
        return sum(s.nbytes for s in self._on_the_wire(self.learner.backend.weight_specs()))

    def init_weight_sync(self, group_info: GroupInfo) -> None:
        # in place: the receivers may read this rank's parameters where they are (a transport that can uses it)
        self.transport = transport_plan(self.cfg.sync.transport).sender(in_place=self.learner.weights_in_place())
        self.transport.init(group_info)

    def send_weights(self, plan: BucketPlan | None = None):
        """Every rank walks its full weights in lockstep; rank 0 streams them to the rollout workers
        (ipc: returns the handles the rollout workers read them from). plan: weight_plan's, unless given."""
        entered, t0 = time.time(), time.perf_counter()
        weights = self.learner.named_full_weights()
        if self.rank == 0:
            sent = self.transport.send(weights, plan or self.plan)
            self.last_send = {"send_s": time.perf_counter() - t0, **getattr(self.transport, "last_send", {}),
                              "entered_at": entered, "left_at": time.time()}  # wall clock: hops to and from here
            return sent
        for _ in weights:
            pass
        return None

    def send_report(self) -> dict:
        """Rank 0: how long the last send_weights took in this process (the transport's parts with it)."""
        return dict(self.last_send)

    def release(self) -> None:
        """Colocated, after a step: optimizer state to host memory, cached blocks back to the device."""
        self.learner.release()

    def full_weights(self) -> dict:
        """Every parameter, full, on rank 0 ({} elsewhere); all ranks must be called (collective)."""
        weights = {n: t.detach().cpu().clone() for n, t in self.learner.named_full_weights()}
        return weights if self.rank == 0 else {}

    def save(self, path: str) -> None:
        self.learner.save(path)

    def cores(self) -> int:
        """CPU cores this rank's process may run on (its node's, unless pinned)."""
        return len(os.sched_getaffinity(0))

    def ping(self) -> bool:
        return True

    def load(self, path: str) -> None:
        self.learner.load(path)


class LearnerGroup(RankGroup):
    """learner.num_workers LearnerWorker actors, named learner-<rank>."""

    def __init__(self, cfg: Config, model_path: str, placement, namespace: str | None = None) -> None:
        super().__init__(LearnerWorker, "learner", cfg.learner.num_workers, placement, namespace, cfg, model_path)

    def train(self, refs: list[list[ray.ObjectRef]], values: list[ray.ObjectRef] | None = None,
              threads: int | None = None) -> TrainResult:
        """Shard the groups (list-wrapped refs) across ranks, train on all, merge their stats. values (ppo): the
        critic's, one object ref per rank (CriticGroup.values, sharded alike); each rank receives only its own, and
        the returns come back the same way, one ref per rank. threads: each rank's torch threads."""
        n = len(self.workers)
        if values is not None and len(values) != n:
            raise ValueError(f"values: one object ref per learner rank ({n}), got {len(values)}")
        calls = [w.train.remote(refs[r::n], None if values is None else values[r], threads)
                 for r, w in enumerate(self.workers)]
        per_rank = self._all([stats for stats, _ in calls], "learner train")
        return TrainResult(merge_rank_stats(per_rank), None if values is None else [ret for _, ret in calls])

    def completion_logprobs(self, groups: list[TrajectoryGroup]) -> list[list[float]]:
        """Rank 0's answer; every rank computes (sharded forward passes are collective)."""
        return self._all([w.completion_logprobs.remote(groups) for w in self.workers], "learner scoring")[0]

    def send_weights(self, plan: BucketPlan | None = None) -> list[ray.ObjectRef]:
        return [w.send_weights.remote(plan) for w in self.workers]

    def release(self) -> None:
        self._all([w.release.remote() for w in self.workers], "learner release")

    def full_weights(self) -> dict:
        return self._all([w.full_weights.remote() for w in self.workers], "learner weights")[0]
