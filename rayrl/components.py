"""From the whole run config to each component's own sections: the one place that knows which sections a
component takes. Actors and the driver build components here; components never see the whole Config."""

from __future__ import annotations

import os

from rayrl.config import Config, TeacherConfig, VLLMConfig
from rayrl.engines.learner.base import LearnerSetup
from rayrl.engines.registry import ROLLOUT_ENGINES, resolve, teacher_engine
from rayrl.engines.rollout.base import EngineSetup
from rayrl.imports import load_object


def engine_setup(cfg: Config, num_threads: int = 1) -> EngineSetup:
    return EngineSetup(transport=cfg.sync.transport, on_gpu=cfg.on_gpu, seed=cfg.learner.seed,
                       request_timeout_s=cfg.rollout.request_timeout_s, bitwise=cfg.rollout.bitwise_on_policy,
                       sleeps=cfg.placement.mode == "colocate" and cfg.on_gpu, num_threads=num_threads,
                       lora=cfg.lora if cfg.lora.enabled else None)


def rollout_engine(cfg: Config, model_path: str, num_threads: int = 1, tokenizer=None):
    """rollout.engine's class, given the section of the same name (hf or vllm)."""
    engine_cls = resolve(ROLLOUT_ENGINES, cfg.rollout.engine, "rollout.engine")
    return engine_cls(model_path, getattr(cfg, cfg.rollout.engine), engine_setup(cfg, num_threads), tokenizer)


def learner_setup(cfg: Config, num_threads: int = 1) -> LearnerSetup:
    return LearnerSetup(on_gpu=cfg.on_gpu, temperature=cfg.rollout.temperature,
                        max_new_tokens=cfg.rollout.max_new_tokens, bitwise=cfg.rollout.bitwise_on_policy,
                        kv_block_size=cfg.vllm.kv_block_size, num_threads=num_threads,
                        lora=cfg.lora if cfg.lora.enabled else None, distill=cfg.teacher.enabled)


def learner(cfg: Config, model_path: str, num_threads: int = 1):
    from rayrl.engines.learner import Learner

    return Learner(model_path, cfg.learner, cfg.algorithm, learner_setup(cfg, num_threads))


def critic(cfg: Config, model_path: str, num_threads: int = 1):
    from rayrl.engines.learner.critic import Critic

    return Critic(model_path, cfg.learner, cfg.algorithm, learner_setup(cfg, num_threads))


def workflow(cfg: Config, search_path: list[str] | None = None):
    """rollout.workflow's class, built with the agent section."""
    cls = load_object(cfg.rollout.workflow, "rollout.workflow", search_path or [os.getcwd()], "class")
    return cls(cfg.agent)


def teacher(section: TeacherConfig, temperature: float, on_gpu: bool, num_threads: int = 1,
            vllm: VLLMConfig | None = None):
    """teacher.engine's teacher of the student's tokens, from teacher.path (frozen, never in a weight sync); the
    vllm engine takes the vllm section's settings with the teacher's own memory share, on one GPU."""
    engine = teacher_engine(section.engine)
    if section.engine == "vllm":
        own = (vllm or VLLMConfig()).model_copy(update={"gpu_memory_utilization": section.gpu_memory_utilization,
                                                        "tensor_parallel_size": 1})
        return engine(section.path, temperature, on_gpu, num_threads, own)
    return engine(section.path, temperature, on_gpu, num_threads)


def reward_model(cfg: Config, model_path: str, num_threads: int = 1, search_path: list[str] | None = None):
    """reward.model.kind's model: a judge on its own rollout engine (hf or vllm, never in a weight sync) or a
    scorer."""
    m = cfg.reward.model
    if m.kind == "scorer":
        from rayrl.engines.reward.scorer import SequenceScorer

        return SequenceScorer(model_path, m, cfg.on_gpu, num_threads)
    from rayrl.engines.reward.judge import Judge
    from rayrl.models.tokenizer import load_tokenizer

    section = getattr(cfg, m.engine)
    if m.engine == "vllm":
        section = section.model_copy(update={"gpu_memory_utilization": m.gpu_memory_utilization,
                                             "tensor_parallel_size": 1})
    setup = EngineSetup(transport="gloo", on_gpu=cfg.on_gpu, seed=cfg.learner.seed, request_timeout_s=m.timeout_s,
                        bitwise=False, sleeps=False, num_threads=num_threads)
    tokenizer = load_tokenizer(model_path)
    engine = resolve(ROLLOUT_ENGINES, m.engine, "reward.model.engine")(model_path, section, setup, tokenizer)
    return Judge(m, engine, tokenizer, search_path)
