"""DeepSpeed backend: ZeRO stage 2 or 3 (learner.zero_stage), bf16 when learner.dtype=bfloat16,
DeepSpeed's own AdamW (torch implementation) and gradient clipping. Gradient accumulation is
driven by the Learner: the boundary is set on the last micro-batch of each optimizer step."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import torch

from rayrl.config import LearnerConfig
from rayrl.engines.learner.schedule import make_scheduler

CHECKPOINT_DIR, TAG = "deepspeed", "rayrl"


def ds_config(lc: LearnerConfig, train: bool) -> dict:
    zero: dict = {"stage": lc.zero_stage}
    if train and lc.cpu_offload:
        zero["offload_optimizer"] = {"device": "cpu"}
    out = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
           "zero_optimization": zero, "bf16": {"enabled": lc.dtype == "bfloat16"}, "steps_per_print": 10**9}
    if train:
        out["gradient_clipping"] = lc.grad_clip
        out["optimizer"] = {"type": "AdamW", "params": {"lr": lc.lr, "weight_decay": lc.weight_decay,
                                                          "betas": list(lc.adam_betas), "eps": lc.adam_eps,
                                                          "torch_adam": True}}
    return out


def _safe_checkpoint_engine():
    """DeepSpeed's torch checkpoint engine, loading with weights_only=True: a checkpoint file cannot run
    code (DeepSpeed's own loads with weights_only=False)."""
    from deepspeed.runtime.checkpoint_engine.torch_checkpoint_engine import TorchCheckpointEngine
    from deepspeed.runtime.fp16.loss_scaler import LossScaler
    from deepspeed.runtime.zero.config import ZeroStageEnum
    from deepspeed.utils.tensor_fragment import fragment_address

    allowed = [ZeroStageEnum, LossScaler, fragment_address]  # the non-tensor types ZeRO-2 and -3 checkpoints hold

    class WeightsOnlyCheckpointEngine(TorchCheckpointEngine):
        def load(self, path: str, map_location=None):
            with torch.serialization.safe_globals(allowed):
                return torch.load(path, map_location=map_location, weights_only=True)

    return WeightsOnlyCheckpointEngine()


class DeepSpeedBackend:
    def __init__(self, lc: LearnerConfig, model, ref_model, device: torch.device) -> None:
        import deepspeed

        self.lc = lc
        self._gathered = deepspeed.zero.GatheredParameters
        if lc.activation_checkpointing:
            model.gradient_checkpointing_enable()
        self.model, _, _, self.scheduler = deepspeed.initialize(
            model=model, model_parameters=model.parameters(), config=ds_config(lc, train=True),
            lr_scheduler=lambda opt: make_scheduler(opt, lc))
        self.model.checkpoint_engine = _safe_checkpoint_engine()
        self.ref_model = None
        self.whole_parameters = False  # ZeRO keeps its own flat buffers and masters: syncs take a copy
        if ref_model is not None:
            self.ref_model = deepspeed.initialize(model=ref_model, config=ds_config(lc, train=False))[0]

    def backward(self, loss: torch.Tensor, last: bool) -> None:
        self.model.set_gradient_accumulation_boundary(last)
        self.model.backward(loss, scale_wrt_gas=False)

    def discard_grads(self) -> bool:
        """DeepSpeed cannot drop a half-accumulated step (its ZeRO buckets are mid-reduction)."""
        return False

    def step(self) -> float:
        self.model.step()
        norm = self.model.get_global_grad_norm()
        return float(norm) if norm is not None else 0.0

    def named_full_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """Gather one parameter at a time on every rank (ZeRO-3), yield a copy, re-partition."""
        for name, p in self.model.module.named_parameters():
            if self.lc.zero_stage == 3:
                with self._gathered([p]):
                    full = p.data.detach().clone()
            else:
                full = p.detach()
            yield name, full

    def weight_specs(self) -> list[tuple[str, tuple[int, ...], torch.dtype]]:
        """Full shapes without gathering: ZeRO-3 keeps them in ds_shape."""
        return [(n, tuple(getattr(p, "ds_shape", p.shape)), p.dtype) for n, p in self.model.module.named_parameters()]

    def save(self, out: Path) -> None:
        self.model.save_checkpoint(str(out / CHECKPOINT_DIR), tag=TAG)

    def load(self, out: Path) -> None:
        self.model.load_checkpoint(str(out / CHECKPOINT_DIR), tag=TAG)
