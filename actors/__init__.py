"""Thin Ray shells over rayrl.engines: resources, concurrency and lifecycle; no algorithms.

Each actor class is imported from its module on first use: a Ray worker that starts one actor imports that
actor's module and what it needs, not every actor's dependencies (transformers, the learner's engines)."""

from importlib import import_module

_MODULE_OF = {"WeightBroadcaster": "broadcast", "TrajectoryBuffer": "buffer", "CriticGroup": "critic",
              "CriticWorker": "critic", "Gateway": "gateway", "LearnerGroup": "learner", "LearnerWorker": "learner",
              "RewardActor": "reward", "RewardModelActor": "reward_model", "RolloutWorker": "rollout",
              "TeacherActor": "teacher"}
__all__ = sorted(_MODULE_OF)


def __getattr__(name: str):
    if name not in _MODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{_MODULE_OF[name]}"), name)
