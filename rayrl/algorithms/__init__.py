"""Advantages, policy losses and KL estimators: pure torch over Batch tensors."""

from rayrl.algorithms.grpo import group_advantages, grpo_loss, kl_k3, token_mean

__all__ = ["group_advantages", "grpo_loss", "kl_k3", "token_mean"]
