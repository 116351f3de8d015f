"""Config: the whole run, one section per component, validated section by section and then by the rules across
sections."""

from __future__ import annotations

from pydantic import model_validator

from rayrl.config.rules import check_rules
from rayrl.config.section import Section
from rayrl.config.sections import (AgentConfig, AlgorithmConfig, CheckpointConfig, ClusterConfig, DataConfig,
                                   DemoConfig, EvalConfig, HFConfig, LearnerConfig, LoraConfig, MetricsConfig,
                                   ModelConfig, PlacementConfig, RewardConfig, RolloutConfig, SchedulerConfig,
                                   SyncConfig, TeacherConfig, VLLMConfig)


class Config(Section):
    """The whole run: one section per component, each defaulting to its own defaults."""

    cluster: ClusterConfig = ClusterConfig()
    scheduler: SchedulerConfig = SchedulerConfig()
    placement: PlacementConfig = PlacementConfig()
    model: ModelConfig = ModelConfig()
    demo: DemoConfig = DemoConfig()
    data: DataConfig = DataConfig()
    reward: RewardConfig = RewardConfig()
    teacher: TeacherConfig = TeacherConfig()
    rollout: RolloutConfig = RolloutConfig()
    eval: EvalConfig = EvalConfig()
    hf: HFConfig = HFConfig()
    vllm: VLLMConfig = VLLMConfig()
    agent: AgentConfig = AgentConfig()
    learner: LearnerConfig = LearnerConfig()
    lora: LoraConfig = LoraConfig()
    algorithm: AlgorithmConfig = AlgorithmConfig()
    sync: SyncConfig = SyncConfig()
    checkpoint: CheckpointConfig = CheckpointConfig()
    metrics: MetricsConfig = MetricsConfig()

    @model_validator(mode="after")
    def _rules(self) -> "Config":
        check_rules(self)  # each rule across sections is a named function in rayrl.config.rules
        return self

    @property
    def on_gpu(self) -> bool:
        return self.cluster.n_gpus_per_node > 0


SECTIONS = {name: field.annotation for name, field in Config.model_fields.items()}
