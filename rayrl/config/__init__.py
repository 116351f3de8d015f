"""The run's configuration, in layers with no way back: section (strict fields) -> sections (one model per
component) -> rules (across sections) -> run (Config, the whole run) -> load (files and overrides). Everything a
user or a component needs is importable from rayrl.config."""

from rayrl.config.files import (ConfigError, explain, known_keys, merge, parse_overrides, read_config_file,
                                read_yaml, write_config_file)
from rayrl.config.load import load_config
from rayrl.config.run import SECTIONS, Config
from rayrl.config.section import F, Section
from rayrl.config.sections import (ALGORITHM_ALIASES, GROUP_RELATIVE, TYPE_DEFAULTS, AgentConfig, AlgorithmConfig,
                                   CheckpointConfig, ClusterConfig, DataConfig, DemoConfig, EvalConfig, HFConfig,
                                   LearnerConfig, LoraConfig, MetricsConfig, ModelConfig, PlacementConfig,
                                   RewardConfig, RewardModelConfig, RolloutConfig, SchedulerConfig,
                                   ServedModelConfig, SyncConfig, TeacherConfig, VLLMConfig)

__all__ = ["ALGORITHM_ALIASES", "GROUP_RELATIVE", "SECTIONS", "TYPE_DEFAULTS", "AgentConfig", "AlgorithmConfig",
           "CheckpointConfig", "ClusterConfig", "Config", "ConfigError", "DataConfig", "DemoConfig", "EvalConfig", "F",
           "HFConfig", "LearnerConfig", "LoraConfig", "MetricsConfig", "ModelConfig", "PlacementConfig",
           "RewardConfig", "RewardModelConfig", "RolloutConfig", "SchedulerConfig", "Section",
           "ServedModelConfig", "SyncConfig", "TeacherConfig", "VLLMConfig", "explain", "known_keys", "load_config", "merge", "parse_overrides", "read_config_file",
           "read_yaml", "write_config_file"]
