"""Reward shaping and sample filtering that happen before advantages: DAPO's overlong handling."""

from __future__ import annotations

import torch

from rayrl.config import AlgorithmConfig


def overlong_penalty(lengths: torch.Tensor, max_new_tokens: int, cfg: AlgorithmConfig) -> torch.Tensor:
    """[B] penalty <= 0: 0 up to max_new_tokens - overlong_buffer tokens, then falling linearly to
    -overlong_penalty at max_new_tokens (DAPO's soft overlong punishment); all 0 when the buffer is 0."""
    if cfg.overlong_buffer == 0:
        return torch.zeros_like(lengths, dtype=torch.float32)
    start = max_new_tokens - cfg.overlong_buffer
    over = (lengths.float() - start).clamp(min=0.0)
    return -cfg.overlong_penalty * (over / cfg.overlong_buffer).clamp(max=1.0)


def shape_batch(rewards: torch.Tensor, loss_mask: torch.Tensor, truncated: torch.Tensor, max_new_tokens: int,
                cfg: AlgorithmConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """(rewards with the overlong penalty, loss mask without truncated samples when overlong_filter)."""
    rewards = rewards + overlong_penalty(loss_mask.sum(-1), max_new_tokens, cfg)
    if cfg.overlong_filter:
        loss_mask = loss_mask * (~truncated).float().unsqueeze(1)
    return rewards, loss_mask
