"""Reward functions, referenced by import string ("package.module:function")."""

from rayrl.rewards.registry import RewardResult, load_reward_fn

__all__ = ["RewardResult", "load_reward_fn"]
