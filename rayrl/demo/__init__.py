"""The demo models, built offline from the config and cached: the policy (rayrl.demo.policy, warmed up on the task)
and the judge or scorer (rayrl.demo.judge). prepare_models runs before the actor system is built: the actors
receive paths, never a builder."""

from __future__ import annotations

from dataclasses import dataclass

from rayrl.config import Config


@dataclass(frozen=True)
class ModelPaths:
    """What the actors load: the policy's directory and the reward model's (None: no reward model)."""

    policy: str
    reward_model: str | None = None

    @classmethod
    def given(cls, cfg: Config) -> ModelPaths:
        """The paths the config names itself; a model the config leaves to the demo builder is refused, naming
        prepare_models."""
        missing = [key for key, unset in (("model.path", cfg.model.path is None),
                                          ("reward.model.path", cfg.reward.model.kind != "none"
                                           and cfg.reward.model.path is None)) if unset]
        if missing:
            raise ValueError(f"{' and '.join(missing)} unset: build the demo models before the actor system, "
                             "ActorSystem(cfg, models=rayrl.demo.prepare_models(cfg))")
        return cls(cfg.model.path, cfg.reward.model.path if cfg.reward.model.kind != "none" else None)


def prepare_models(cfg: Config) -> ModelPaths:
    """model.path, or the demo policy built for data.task from demo.*; reward.model.path, or the demo judge or
    scorer for the arithmetic task (built once per configuration, then read from demo.cache_dir)."""
    from rayrl.demo.judge import build_reward_model
    from rayrl.demo.policy import build_model

    policy = str(build_model(cfg.model, cfg.demo, cfg.data))
    if cfg.reward.model.kind == "none":
        return ModelPaths(policy)
    return ModelPaths(policy, str(build_reward_model(cfg.reward.model, cfg.demo, cfg.data)))
