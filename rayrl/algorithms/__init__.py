"""Advantages, policy losses and KL estimators: pure torch over Batch tensors."""

from rayrl.algorithms.advantages import ADVANTAGES, advantages, group_advantages
from rayrl.algorithms.grpo import grpo_loss, kl_k3, token_mean

__all__ = ["ADVANTAGES", "advantages", "group_advantages", "grpo_loss", "kl_k3", "token_mean"]
