"""The optimizer every torch-side backend builds (AdamW from learner.*) and its learning-rate schedule:
linear warm-up, then constant, linear or cosine decay to 0 at total_steps."""

from __future__ import annotations

import math

import torch

from rayrl.config import LearnerConfig


def lr_factor(step: int, cfg: LearnerConfig) -> float:
    if step < cfg.lr_warmup_steps:
        return (step + 1) / cfg.lr_warmup_steps
    if cfg.lr_schedule == "constant":
        return 1.0
    span = max(1, cfg.total_steps - cfg.lr_warmup_steps)
    progress = min(1.0, (step - cfg.lr_warmup_steps) / span)
    return 1.0 - progress if cfg.lr_schedule == "linear" else 0.5 * (1.0 + math.cos(math.pi * progress))


def make_scheduler(optimizer: torch.optim.Optimizer, cfg: LearnerConfig) -> torch.optim.lr_scheduler.LambdaLR:
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_factor(step, cfg))


def trained_only(model: torch.nn.Module, state: dict) -> dict:
    """A model state without the frozen parameters (LoRA's base): they come from model.path, not a checkpoint."""
    return {k: v for k, v in state.items() if k not in _frozen(model)}


def _frozen(model: torch.nn.Module) -> set[str]:
    """Names of parameters that do not train, each name of a tied one (lm_head beside the embeddings) too."""
    return {n for n, p in model.named_parameters(remove_duplicate=False) if not p.requires_grad}


def load_trained(model: torch.nn.Module, state: dict) -> None:
    """Load what trained_only kept; anything else missing, or anything unknown, is an error."""
    missing, unexpected = model.load_state_dict(state, strict=False)
    frozen = _frozen(model)
    if unexpected or set(missing) - frozen:
        raise RuntimeError(f"checkpoint does not match the model: missing {sorted(set(missing) - frozen)[:5]}, "
                           f"unexpected {sorted(unexpected)[:5]}")


def make_optimizer(params, cfg: LearnerConfig) -> torch.optim.AdamW:
    """AdamW over the parameters that train (LoRA: the adapters only; the frozen base holds no state)."""
    params = [p for p in params if p.requires_grad]
    fused = all(p.is_cuda for p in params) if cfg.adam_fused is None else cfg.adam_fused
    return torch.optim.AdamW(params, lr=cfg.lr, betas=cfg.adam_betas, eps=cfg.adam_eps, weight_decay=cfg.weight_decay,
                             fused=fused or None)
