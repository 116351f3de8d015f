"""The Learner and its backends: train on batches, score log-probs, hand out full weights."""

from rayrl.engines.learner.base import LearnerBackend
from rayrl.engines.learner.learner import Learner

__all__ = ["Learner", "LearnerBackend"]
