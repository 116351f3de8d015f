"""Advantage estimators, one per algorithm.type: the batch's rewards [B] (and, for some, per-token KL
penalties and critic values [B, T]) -> advantages [B, T] on the scored tokens, 0 elsewhere."""

from __future__ import annotations

from collections.abc import Callable

import torch

from rayrl.algorithms.value import gae
from rayrl.config import AlgorithmConfig


def _group_sums(values: torch.Tensor, group_index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    n_groups = int(group_index.max()) + 1
    count = torch.zeros(n_groups).index_add_(0, group_index, torch.ones_like(values))
    return torch.zeros(n_groups).index_add_(0, group_index, values), count


def group_advantages(rewards: torch.Tensor, group_index: torch.Tensor, std_normalize: bool,
                     eps: float) -> torch.Tensor:
    """GRPO: (r - mean of its group) / (std of its group + eps); population std."""
    total, count = _group_sums(rewards, group_index)
    centred = rewards - (total / count)[group_index]
    if not std_normalize:
        return centred
    var, _ = _group_sums(centred**2, group_index)
    return centred / ((var / count).sqrt()[group_index] + eps)


def leave_one_out_advantages(rewards: torch.Tensor, group_index: torch.Tensor) -> torch.Tensor:
    """RLOO: r minus the mean of the other samples of its group (0 for a group of one)."""
    total, count = _group_sums(rewards, group_index)
    n = count[group_index]
    others = (total[group_index] - rewards) / (n - 1).clamp(min=1)
    return torch.where(n > 1, rewards - others, torch.zeros_like(rewards))


def masked_whiten(values: torch.Tensor, mask: torch.Tensor, eps: float) -> torch.Tensor:
    """(x - mean) / (std + eps) over the masked entries (population std); 0 outside the mask."""
    n = mask.sum().clamp(min=1.0)
    mean = (values * mask).sum() / n
    std = (((values - mean) * mask) ** 2).sum().div(n).sqrt()
    return (values - mean) / (std + eps) * mask


def last_token(mask: torch.Tensor) -> torch.Tensor:
    """[B, T] one-hot of each row's last scored token (rows without one: all 0)."""
    return ((mask.cumsum(-1) == mask.sum(-1, keepdim=True)) & (mask > 0)).float()


def reverse_cumsum(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Entry t: the sum of values[t:] over the mask (undiscounted returns to go)."""
    return (values * mask).flip(-1).cumsum(-1).flip(-1) * mask


# sequence-level estimators: the sequence's reward (minus its KL when kl_in_reward) -> one advantage [B]
SEQUENCE_ESTIMATORS: dict[str, Callable[[torch.Tensor, torch.Tensor, AlgorithmConfig], torch.Tensor]] = {
    "grpo": lambda r, g, cfg: group_advantages(r, g, cfg.std_normalize, cfg.advantage_std_eps),
    "dapo": lambda r, g, cfg: group_advantages(r, g, cfg.std_normalize, cfg.advantage_std_eps),
    "gspo": lambda r, g, cfg: group_advantages(r, g, cfg.std_normalize, cfg.advantage_std_eps),
    "dr_grpo": lambda r, g, cfg: group_advantages(r, g, False, cfg.advantage_std_eps),  # no std, no length normalisation
    "rloo": lambda r, g, cfg: leave_one_out_advantages(r, g),
}


def advantages(rewards: torch.Tensor, group_index: torch.Tensor, mask: torch.Tensor, cfg: AlgorithmConfig,
               kl: torch.Tensor | None = None, values: torch.Tensor | None = None
               ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(advantages [B, T], returns [B, T] for the critic or None). kl: per-token KL to the reference,
    charged to the reward as -beta * kl when kl_in_reward; values: the critic's, for ppo."""
    penalty = -cfg.beta * kl * mask if (cfg.kl_in_reward and kl is not None) else torch.zeros_like(mask)
    if cfg.type in SEQUENCE_ESTIMATORS:
        seq = SEQUENCE_ESTIMATORS[cfg.type](rewards + penalty.sum(-1), group_index, cfg)
        return seq.unsqueeze(1) * mask, None
    if cfg.type == "reinforce_pp":  # REINFORCE++: token returns to go, normalised over the batch's tokens
        returns = rewards.unsqueeze(1) * mask + reverse_cumsum(penalty, mask)
        return masked_whiten(returns, mask, cfg.advantage_std_eps), None
    if cfg.type == "ppo":
        if values is None:
            raise ValueError("algorithm.type=ppo needs the critic's values")
        token_rewards = penalty + rewards.unsqueeze(1) * last_token(mask)
        adv, returns = gae(token_rewards, values, mask, cfg.gae_gamma, cfg.gae_lambda)
        return masked_whiten(adv, mask, cfg.advantage_std_eps), returns
    raise ValueError(f"unknown algorithm.type {cfg.type!r}")
