"""FSDP2 learner: `fully_shard` per decoder layer and the root, over the default process group
(nccl on GPU, gloo on CPU). bf16 compute with fp32 master weights and fp32 gradient reduction when
learner.dtype=bfloat16; optional CPU offload and activation checkpointing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict, get_state_dict,
                                                     set_state_dict)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard
from torch.distributed.tensor import DTensor

from rayrl.config import Config
from rayrl.engines.learner.checkpoint import export_hf, load_extra_state, save_extra_state
from rayrl.engines.learner.device import attention_for, learner_device
from rayrl.engines.learner.microbatch import MicroBatch
from rayrl.engines.learner.policy_step import torch_dist_data_parallel, train_step
from rayrl.engines.learner.schedule import make_scheduler
from rayrl.engines.learner.torch_backend import batch_logprobs, microbatch_logprobs
from rayrl.models.builder import load_policy
from rayrl.types import Batch


class FSDPLearner:
    def __init__(self, cfg: Config, model_path: str, num_threads: int = 1) -> None:
        torch.set_num_threads(max(1, num_threads))
        torch.manual_seed(cfg.learner.seed)
        self.cfg, self.device = cfg, learner_device(cfg)
        self.mesh = init_device_mesh(self.device.type, (dist.get_world_size(),))
        load = (model_path, attention_for(self.device), cfg.learner.logprob_chunk_tokens, cfg.learner.compile)
        model, self.tokenizer = load_policy(*load)
        self.model = self._shard(model)
        self.ref_model = None
        if cfg.algorithm.beta > 0:
            self.ref_model = self._shard(load_policy(*load)[0].eval().requires_grad_(False))
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=cfg.learner.lr,
                                           weight_decay=cfg.learner.weight_decay)
        self.scheduler = make_scheduler(self.optimizer, cfg.learner)
        self.dp = torch_dist_data_parallel()
        self.version = 0

    def _shard(self, model):
        lc = self.cfg.learner
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) \
            if lc.dtype == "bfloat16" else MixedPrecisionPolicy()
        offload = CPUOffloadPolicy() if lc.cpu_offload else OffloadPolicy()
        if not lc.cpu_offload:
            model.to(self.device)
        if lc.activation_checkpointing:
            model.gradient_checkpointing_enable()
        for layer in model.model.layers:
            fully_shard(layer, mesh=self.mesh, mp_policy=mp, offload_policy=offload)
        fully_shard(model, mesh=self.mesh, mp_policy=mp, offload_policy=offload)
        return model

    # ---- primitives for policy_step ------------------------------------------------------
    def logprobs(self, mb: MicroBatch, reference: bool = False) -> torch.Tensor:
        return microbatch_logprobs(self.ref_model if reference else self.model, mb, self.cfg.rollout.temperature,
                                   self.device)

    def backward(self, loss: torch.Tensor, last: bool) -> None:
        self.model.set_requires_gradient_sync(last)  # reduce-scatter once, after the last micro-batch
        loss.backward()

    def step(self) -> float:
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.learner.grad_clip)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return float(norm.full_tensor() if isinstance(norm, DTensor) else norm)

    # ---- LearnerBackend ------------------------------------------------------------------
    def train_step(self, batch: Batch) -> dict[str, float]:
        stats = train_step(self, batch, self.dp)
        self.version += 1
        return stats

    def compute_logprobs(self, batch: Batch) -> torch.Tensor:
        """Collective: every rank must call it with a batch of the same shape."""
        return batch_logprobs(self.model, batch, self.cfg.rollout.temperature, self.device)

    def named_full_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """One full tensor at a time, gathered on every rank in the same order (a collective)."""
        for name, p in self.model.named_parameters():
            yield name, (p.full_tensor() if isinstance(p, DTensor) else p).detach()

    def weight_specs(self) -> list[tuple[str, tuple[int, ...], torch.dtype]]:
        """Global shapes, no communication (a DTensor's shape is the full one)."""
        return [(n, tuple(p.shape), p.dtype) for n, p in self.model.named_parameters()]

    def save(self, path: str) -> None:
        out = Path(path)
        model_sd, optim_sd = get_state_dict(self.model, self.optimizer)
        dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=str(out / "dcp"))
        full = get_model_state_dict(self.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        if dist.get_rank() == 0:
            export_hf(full, self.model.config, self.tokenizer, out)
            save_extra_state(out, self.scheduler, self.version)
        dist.barrier()

    def load(self, path: str) -> None:
        model_sd, optim_sd = get_state_dict(self.model, self.optimizer)
        state = {"model": model_sd, "optim": optim_sd}
        dcp.load(state, checkpoint_id=str(Path(path) / "dcp"))
        set_state_dict(self.model, self.optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
        self.version = load_extra_state(Path(path), self.scheduler)
