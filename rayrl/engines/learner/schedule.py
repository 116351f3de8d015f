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


def make_optimizer(params, cfg: LearnerConfig) -> torch.optim.AdamW:
    """AdamW over the parameters that train (LoRA: the adapters only; the frozen base holds no state)."""
    params = [p for p in params if p.requires_grad]
    return torch.optim.AdamW(params, lr=cfg.lr, betas=cfg.adam_betas, eps=cfg.adam_eps, weight_decay=cfg.weight_decay)
