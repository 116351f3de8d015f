"""Sequence-level advantage estimators, one per algorithm.type; each maps the batch's rewards [B] and
group index [B] to advantages [B] that every token of the sample carries."""

from __future__ import annotations

from collections.abc import Callable

import torch

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


def batch_normalized_advantages(rewards: torch.Tensor, eps: float) -> torch.Tensor:
    """REINFORCE++: (r - batch mean) / (batch std + eps), population std."""
    centred = rewards - rewards.mean()
    return centred / (centred.pow(2).mean().sqrt() + eps)


ADVANTAGES: dict[str, Callable[[torch.Tensor, torch.Tensor, AlgorithmConfig], torch.Tensor]] = {
    "grpo": lambda r, g, cfg: group_advantages(r, g, cfg.std_normalize, cfg.eps),
    "dr_grpo": lambda r, g, cfg: group_advantages(r, g, False, cfg.eps),  # no std, no length normalisation
    "rloo": lambda r, g, cfg: leave_one_out_advantages(r, g),
    "reinforce_pp": lambda r, g, cfg: batch_normalized_advantages(r, cfg.eps),
}


def advantages(rewards: torch.Tensor, group_index: torch.Tensor, cfg: AlgorithmConfig) -> torch.Tensor:
    return ADVANTAGES[cfg.type](rewards, group_index, cfg)
