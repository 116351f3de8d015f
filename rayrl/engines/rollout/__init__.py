"""Rollout engines: generate samples with behaviour log-probs and per-token policy versions."""

from rayrl.engines.rollout.base import RolloutEngine

__all__ = ["RolloutEngine"]
