"""On-policy distillation's per-token signal: the teacher's log-prob of each token the student sampled minus the
student's own (the negative of the per-token reverse KL), weighted beside the task reward's advantage."""

from __future__ import annotations

import torch

from rayrl.config import AlgorithmConfig


def with_teacher(task: torch.Tensor, teacher: torch.Tensor, behav: torch.Tensor, mask: torch.Tensor,
                 cfg: AlgorithmConfig) -> torch.Tensor:
    """[B, T] advantages: reward_coef x the task's + distill_coef x (teacher - student) log-prob on each masked
    token. The student's is its sampling log-prob, so a stale sample is corrected by the loss's importance weight."""
    return cfg.reward_coef * task + cfg.distill_coef * (teacher - behav) * mask


def reverse_kl(teacher: torch.Tensor, behav: torch.Tensor, mask: torch.Tensor) -> float:
    """The mean over masked tokens of log p_student - log p_teacher: the sampled estimate of KL(student || teacher)."""
    return float(((behav - teacher) * mask).sum() / mask.sum().clamp(min=1))
