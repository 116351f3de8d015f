"""Learner backends: train on batches, recompute log-probs, hand out full weights."""

from rayrl.engines.learner.base import LearnerBackend

__all__ = ["LearnerBackend"]
