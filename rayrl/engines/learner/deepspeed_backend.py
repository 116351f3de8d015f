"""DeepSpeed learner: ZeRO stage 2 or 3 (learner.zero_stage), bf16 when learner.dtype=bfloat16,
DeepSpeed's own AdamW (torch implementation) and gradient clipping. Gradient accumulation is
driven by the caller: the boundary is set on the last micro-batch of each optimizer step."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import torch
import torch.distributed as dist

from rayrl.config import Config
from rayrl.engines.learner.checkpoint import export_hf, load_extra_state, save_extra_state
from rayrl.engines.learner.device import attention_for, learner_device
from rayrl.engines.learner.microbatch import MicroBatch
from rayrl.engines.learner.policy_step import torch_dist_data_parallel, train_step
from rayrl.engines.learner.schedule import make_scheduler
from rayrl.engines.learner.torch_backend import batch_logprobs, microbatch_logprobs
from rayrl.models.builder import load_policy
from rayrl.types import Batch


def ds_config(cfg: Config, train: bool) -> dict:
    lc = cfg.learner
    zero: dict = {"stage": lc.zero_stage}
    if train and lc.cpu_offload:
        zero["offload_optimizer"] = {"device": "cpu"}
    out = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
           "zero_optimization": zero, "bf16": {"enabled": lc.dtype == "bfloat16"}, "steps_per_print": 10**9}
    if train:
        out["gradient_clipping"] = lc.grad_clip
        out["optimizer"] = {"type": "AdamW", "params": {"lr": lc.lr, "weight_decay": lc.weight_decay,
                                                          "betas": [0.9, 0.999], "eps": 1e-8, "torch_adam": True}}
    return out


class DeepSpeedLearner:
    def __init__(self, cfg: Config, model_path: str, num_threads: int = 1) -> None:
        import deepspeed

        torch.set_num_threads(max(1, num_threads))
        torch.manual_seed(cfg.learner.seed)
        self.cfg, self.device = cfg, learner_device(cfg)
        self._gathered = deepspeed.zero.GatheredParameters
        load = (model_path, attention_for(self.device), cfg.learner.logprob_chunk_tokens, cfg.learner.compile)
        model, self.tokenizer = load_policy(*load)
        self.hf_config = model.config
        if cfg.learner.activation_checkpointing:
            model.gradient_checkpointing_enable()
        self.engine, _, _, self.scheduler = deepspeed.initialize(
            model=model, model_parameters=model.parameters(), config=ds_config(cfg, train=True),
            lr_scheduler=lambda opt: make_scheduler(opt, cfg.learner))
        self.ref_engine = None
        if cfg.algorithm.beta > 0:
            ref = load_policy(*load)[0].eval().requires_grad_(False)
            self.ref_engine = deepspeed.initialize(model=ref, config=ds_config(cfg, train=False))[0]
        self.dp = torch_dist_data_parallel()
        self.version = 0

    # ---- primitives for policy_step ------------------------------------------------------
    def logprobs(self, mb: MicroBatch, reference: bool = False) -> torch.Tensor:
        return microbatch_logprobs(self.ref_engine if reference else self.engine, mb, self.cfg.rollout.temperature,
                                   self.device)

    def backward(self, loss: torch.Tensor, last: bool) -> None:
        self.engine.set_gradient_accumulation_boundary(last)
        self.engine.backward(loss, scale_wrt_gas=False)

    def step(self) -> float:
        self.engine.step()
        norm = self.engine.get_global_grad_norm()
        return float(norm) if norm is not None else 0.0

    # ---- LearnerBackend ------------------------------------------------------------------
    def train_step(self, batch: Batch) -> dict[str, float]:
        stats = train_step(self, batch, self.dp)
        self.version += 1
        return stats

    def compute_logprobs(self, batch: Batch) -> torch.Tensor:
        """Collective under ZeRO-3: every rank must call it with a batch of the same shape."""
        return batch_logprobs(self.engine, batch, self.cfg.rollout.temperature, self.device)

    def named_full_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """Gather one parameter at a time on every rank (ZeRO-3), yield a copy, re-partition."""
        for name, p in self.engine.module.named_parameters():
            if self.cfg.learner.zero_stage == 3:
                with self._gathered([p]):
                    full = p.data.detach().clone()
            else:
                full = p.detach()
            yield name, full

    def weight_specs(self) -> list[tuple[str, tuple[int, ...], torch.dtype]]:
        """Full shapes without gathering: ZeRO-3 keeps them in ds_shape."""
        return [(n, tuple(getattr(p, "ds_shape", p.shape)), p.dtype) for n, p in self.engine.module.named_parameters()]

    def save(self, path: str) -> None:
        out = Path(path)
        self.engine.save_checkpoint(str(out / "deepspeed"), tag="rayrl")
        full = {name: t.cpu() for name, t in self.named_full_weights()}
        if dist.get_rank() == 0:
            export_hf(full, self.hf_config, self.tokenizer, out)
            save_extra_state(out, self.scheduler, self.version)
        dist.barrier()

    def load(self, path: str) -> None:
        self.engine.load_checkpoint(str(Path(path) / "deepspeed"), tag="rayrl")
        self.version = load_extra_state(Path(path), self.scheduler)
