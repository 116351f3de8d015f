"""FSDP2 backend: `fully_shard` per decoder layer and the root, over the default process group
(nccl on GPU, gloo on CPU). bf16 compute with fp32 master weights and fp32 gradient reduction when
learner.dtype=bfloat16; optional CPU offload and activation checkpointing."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard
from torch.distributed.tensor import DTensor

from rayrl.config import LearnerConfig
from rayrl.engines.learner.schedule import make_optimizer, make_scheduler, trained_only
from rayrl.models.policy import decoder_layers


class FSDPBackend:
    def __init__(self, lc: LearnerConfig, model, ref_model, device: torch.device) -> None:
        self.lc, self.device = lc, device
        self.mesh = init_device_mesh(device.type, (dist.get_world_size(),))
        self.model = self._shard(model)
        self.ref_model = None if ref_model is None else self._shard(ref_model)
        self.optimizer = make_optimizer(self.model.parameters(), lc)
        self.scheduler = make_scheduler(self.optimizer, lc)
        self.whole_parameters = dist.get_world_size() == 1 and not lc.cpu_offload  # one rank's shard is the whole

    def _shard(self, model):
        lc = self.lc
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) \
            if lc.dtype == "bfloat16" else MixedPrecisionPolicy()
        offload = CPUOffloadPolicy() if lc.cpu_offload else OffloadPolicy()
        if not lc.cpu_offload:
            model.to(self.device)
        if lc.activation_checkpointing:
            model.gradient_checkpointing_enable()
        plain = model.get_base_model() if hasattr(model, "get_base_model") else model  # under LoRA's wrapping
        for layer in decoder_layers(plain) if getattr(model, "shard_per_layer", True) else ():
            fully_shard(layer, mesh=self.mesh, mp_policy=mp, offload_policy=offload)
        fully_shard(model, mesh=self.mesh, mp_policy=mp, offload_policy=offload)
        return model

    def backward(self, loss: torch.Tensor, last: bool) -> None:
        self.model.set_requires_gradient_sync(last)  # reduce-scatter once, after the last micro-batch
        loss.backward()

    def step(self) -> float:
        """A non-finite gradient norm (global: every rank sees the same) skips the update."""
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.lc.grad_clip)
        norm = float(norm.full_tensor() if isinstance(norm, DTensor) else norm)
        if math.isfinite(norm):
            self.optimizer.step()
            self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.model.reshard()  # the root keeps its gathered bf16 copy after a forward: never past an update
        return norm

    def discard_grads(self) -> bool:
        self.optimizer.zero_grad(set_to_none=True)
        return True

    def named_full_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """One full tensor at a time, gathered on every rank in the same order (a collective); on one rank
        the local shard is the full tensor (no gather)."""
        whole = dist.get_world_size() == 1
        self.model.reshard()  # after a forward the root's parameters are its gathered bf16 copies, not the masters
        for name, p in self.model.named_parameters():
            if isinstance(p, DTensor):
                p = p._local_tensor if whole else p.full_tensor()
            yield name, p.detach()

    def weight_specs(self) -> list[tuple[str, tuple[int, ...], torch.dtype]]:
        """Global shapes, no communication (a DTensor's shape is the full one)."""
        return [(n, tuple(p.shape), p.dtype) for n, p in self.model.named_parameters()]

    def save(self, out: Path) -> None:
        """What trains and its optimizer state (a frozen LoRA base comes from model.path)."""
        model_sd, optim_sd = get_state_dict(self.model, self.optimizer)
        dcp.save({"model": trained_only(self.model, model_sd), "optim": optim_sd}, checkpoint_id=str(out / "dcp"))

    def load(self, out: Path) -> None:
        model_sd, optim_sd = get_state_dict(self.model, self.optimizer)
        state = {"model": trained_only(self.model, model_sd), "optim": optim_sd}
        dcp.load(state, checkpoint_id=str(out / "dcp"))
        set_state_dict(self.model, self.optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"],
                       options=StateDictOptions(strict=False))
