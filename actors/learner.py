"""LearnerWorker (one per rank) and LearnerGroup, which fans calls out to every rank and gathers."""

from __future__ import annotations

import os
from datetime import timedelta

import ray
import torch
import torch.distributed as dist

from rayrl import components
from rayrl.batching import batch_stats, collate, completion_values, place_completion_values
from rayrl.config import Config
from rayrl.engines.device_memory import PeakMemory
from rayrl.engines.registry import WEIGHT_TRANSPORTS, resolve
from rayrl.engines.transport.base import BucketPlan, GroupInfo, TensorSpec, plan_buckets
from rayrl.faults import wait_all
from rayrl.metrics import merge_rank_stats
from rayrl.placement import node_address
from rayrl.rendezvous import init_method
from rayrl.types import Batch, TrajectoryGroup


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


def fetch_batch(refs: list[list[ray.ObjectRef]], pad_id: int) -> tuple[list[TrajectoryGroup], Batch]:
    """A rank's groups straight from the object store, collated. Each ref comes wrapped in a list,
    so Ray hands over the reference, not the data."""
    groups: list[TrajectoryGroup] = ray.get([ref[0] for ref in refs])
    return groups, collate(groups, pad_id)


@ray.remote
class LearnerWorker:
    def __init__(self, rank: int, world_size: int, cfg: Config, model_path: str, num_threads: int,
                 master: tuple[str, int, str] | None = None) -> None:
        self.rank, self.world_size, self.cfg = rank, world_size, cfg
        if cfg.learner.backend != "torch":
            init_process_group(cfg, rank, world_size, master)
        self.learner = components.learner(cfg, model_path, num_threads)
        self.pad_id = self.learner.tokenizer.pad_token_id
        self.transport = None

    def train(self, refs: list[list[ray.ObjectRef]], values: dict | None = None) -> dict:
        """One training step on this rank's groups. values (ppo): the critic's, per task id; the
        returns the critic should learn come back the same way, under "returns"."""
        groups, batch = fetch_batch(refs, self.pad_id)
        peak = PeakMemory()
        per_token = None if values is None else place_completion_values(batch, groups, values)
        stats = {**batch_stats(batch, self.learner.version), **self.learner.train_step(batch, per_token)}
        stats["version"] = self.learner.version
        stats["mem_train_gb"] = peak.peak_gb()  # the device's peak while this rank trained (0 on CPU)
        if self.learner.last_returns is not None:
            stats["returns"] = completion_values(batch, self.learner.last_returns, groups)
        return stats

    def completion_logprobs(self, groups: list[TrajectoryGroup]) -> list[list[float]]:
        """Per sample, the learner's log-probs of its completion tokens (to check against rollout)."""
        batch = collate(groups, self.pad_id)
        logp = self.learner.compute_logprobs(batch)
        return [logp[i][batch.loss_mask[i] > 0].tolist() for i in range(logp.shape[0])]

    def weight_plan(self, bucket_bytes: int) -> BucketPlan:
        """The tensors in send order, in sync.dtype (or the learner's own)."""
        wire = self.cfg.sync.dtype
        specs = [TensorSpec(n, shape, str(dtype).removeprefix("torch.") if wire == "learner" else wire)
                 for n, shape, dtype in self.learner.weight_specs()]
        return plan_buckets(specs, bucket_bytes)

    def init_weight_sync(self, group_info: GroupInfo) -> None:
        self.transport = resolve(WEIGHT_TRANSPORTS, self.cfg.sync.transport, "sync.transport")()
        self.transport.init(group_info)

    def send_weights(self, plan: BucketPlan):
        """Every rank walks its full weights in lockstep; rank 0 streams them to the rollout workers
        (ipc: returns the handles the rollout workers read them from)."""
        weights = self.learner.named_full_weights()
        if self.rank == 0:
            return self.transport.send(weights, plan)
        for _ in weights:
            pass
        return None

    def release(self) -> None:
        """Colocated, after a step: optimizer state to host memory, cached blocks back to the device."""
        self.learner.release()

    def full_weights(self) -> dict:
        """Every parameter, full, on rank 0 ({} elsewhere); all ranks must be called (collective)."""
        weights = {n: t.detach().cpu().clone() for n, t in self.learner.named_full_weights()}
        return weights if self.rank == 0 else {}

    def save(self, path: str) -> None:
        self.learner.save(path)

    def ping(self) -> bool:
        return True

    def load(self, path: str) -> None:
        self.learner.load(path)


class LearnerGroup:
    """N LearnerWorker actors, one per placement bundle, named learner-<rank>."""

    def __init__(self, cfg: Config, model_path: str, placement, namespace: str | None = None) -> None:
        n = cfg.learner.num_workers
        rank0 = placement.actor_options("learner", 0)["scheduling_strategy"]
        master = ray.get(node_address.options(scheduling_strategy=rank0).remote())
        self.rank0_strategy = rank0
        self.workers = [
            LearnerWorker.options(name=f"learner-{r}", namespace=namespace, **placement.actor_options("learner", r))
            .remote(r, n, cfg, model_path, placement.threads("learner"), master)
            for r in range(n)
        ]
        self.names = [f"learner-{r}" for r in range(n)]

    @property
    def rank0(self):
        return self.workers[0]

    def train(self, refs: list[list[ray.ObjectRef]], values: dict | None = None) -> dict:
        """Shard the groups (list-wrapped refs) across ranks, train on all, merge their stats; given the
        critic's values (ppo), the stats hold under "returns" the critic's targets per task id."""
        n = len(self.workers)
        per_rank = self._all([w.train.remote(refs[r::n], values) for r, w in enumerate(self.workers)], "train")
        returns = [r.pop("returns") for r in per_rank if "returns" in r]
        stats = merge_rank_stats(per_rank)
        if returns:
            stats["returns"] = {k: v for part in returns for k, v in part.items()}
        return stats

    def _all(self, refs: list[ray.ObjectRef], what: str) -> list:
        """Every rank's result; a rank that fails raises at once (the others may wait in a collective)."""
        return wait_all(refs, self.names, f"learner {what}")

    def dead_ranks(self, timeout_s: float = 5.0) -> list[int]:
        """Ranks whose actor is dead (a busy rank that does not answer within timeout_s counts as alive)."""
        refs = [w.ping.remote() for w in self.workers]
        ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
        dead = []
        for r, ref in enumerate(refs):
            try:
                ray.get(ref, timeout=0)
            except ray.exceptions.RayActorError:
                dead.append(r)
            except ray.exceptions.GetTimeoutError:
                pass
        return dead

    def completion_logprobs(self, groups: list[TrajectoryGroup]) -> list[list[float]]:
        """Rank 0's answer; every rank computes (sharded forward passes are collective)."""
        return ray.get([w.completion_logprobs.remote(groups) for w in self.workers])[0]

    def send_weights(self, plan: BucketPlan) -> list[ray.ObjectRef]:
        return [w.send_weights.remote(plan) for w in self.workers]

    def release(self) -> None:
        self._all([w.release.remote() for w in self.workers], "release")

    def full_weights(self) -> dict:
        return ray.get([w.full_weights.remote() for w in self.workers])[0]

    def save(self, path: str) -> None:
        self._all([w.save.remote(path) for w in self.workers], "save")

    def load(self, path: str) -> None:
        self._all([w.load.remote(path) for w in self.workers], "load")

    def kill(self) -> None:
        for w in self.workers:
            ray.kill(w)
