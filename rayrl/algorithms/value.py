"""PPO's critic side: generalised advantage estimation and the clipped value loss."""

from __future__ import annotations

import torch


def gae(token_rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float, lam: float
        ) -> tuple[torch.Tensor, torch.Tensor]:
    """[B, T] each, over right-padded rows whose scored tokens are contiguous; values[t] is the critic's
    estimate before token t. Returns (advantages, returns = advantages + values), 0 off the mask."""
    adv = torch.zeros_like(values)
    running = torch.zeros(values.shape[0], dtype=values.dtype)
    next_value = torch.zeros_like(running)
    for t in reversed(range(values.shape[1])):
        m = mask[:, t]
        following = mask[:, t + 1] if t + 1 < values.shape[1] else torch.zeros_like(m)
        delta = token_rewards[:, t] + gamma * next_value * following - values[:, t]
        running = (delta + gamma * lam * running * following) * m
        adv[:, t] = running
        next_value = values[:, t]
    return adv, (adv + values) * mask


def value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor,
               clip: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Per token 0.5 * max((v - R)^2, (v_clipped - R)^2), v clipped to old +- clip; and the share of
    tokens where the clipped term was the larger (the clip fired)."""
    clipped = old_values + (values - old_values).clamp(-clip, clip)
    plain, bounded = (values - returns) ** 2, (clipped - returns) ** 2
    return 0.5 * torch.maximum(plain, bounded) * mask, (bounded > plain).float() * mask
