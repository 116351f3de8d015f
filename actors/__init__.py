"""Thin Ray shells over rayrl.engines: resources, concurrency and lifecycle; no algorithms."""

from rayrl.actors.broadcast import WeightBroadcaster
from rayrl.actors.buffer import TrajectoryBuffer
from rayrl.actors.critic import CriticGroup, CriticWorker
from rayrl.actors.gateway import Gateway
from rayrl.actors.learner import LearnerGroup, LearnerWorker
from rayrl.actors.reward import RewardActor
from rayrl.actors.reward_model import RewardModelActor
from rayrl.actors.rollout import RolloutWorker

__all__ = ["CriticGroup", "CriticWorker", "Gateway", "LearnerGroup", "LearnerWorker", "RewardActor", "RewardModelActor",
           "RolloutWorker", "TrajectoryBuffer", "WeightBroadcaster"]
