import subprocess
import sys
from pathlib import Path

import pytest

from rayrl.config import ConfigError, load_config, parse_overrides

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "recipes" / "arithmetic_grpo.yaml"


def test_recipe_yaml_and_overrides():
    cfg = load_config(RECIPE, ["rollout.max_staleness=0", "rollout.batch_size=32", "algorithm.beta=0.1"])
    assert (cfg.rollout.max_staleness, cfg.rollout.batch_size, cfg.algorithm.beta) == (0, 32, 0.1)
    assert cfg.reward.fn == "rayrl.rewards.arithmetic:exact_match"


def test_unknown_key_suggests_the_right_one():
    with pytest.raises(ConfigError, match=r"rollout\.batch_szie.*did you mean 'rollout\.batch_size'"):
        load_config(None, ["rollout.batch_szie=3"])


def test_unknown_section_is_named():
    with pytest.raises(ConfigError, match="unknown config key 'rollotu'"):
        load_config(None, ["rollotu.batch_size=3"])


@pytest.mark.parametrize("override, key", [
    ("rollout.batch_size=abc", "rollout.batch_size"),
    ("rollout.batch_size=0", "rollout.batch_size"),
    ("algorithm.type=ppo_critic", "algorithm.type"),
    ("scheduler.type=slurm", "scheduler.type"),
    ("rollout.max_staleness=-1", "rollout.max_staleness"),
])
def test_bad_values_name_the_key(override, key):
    with pytest.raises(ConfigError, match=f"bad value for '{key}'"):
        load_config(None, [override])


def test_malformed_override_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="not of the form"):
        parse_overrides(["rollout.batch_size"])
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="must hold a mapping"):
        load_config(tmp_path / "list.yaml")


def test_plain_torch_learner_is_single_rank():
    with pytest.raises(ConfigError, match="learner.backend=fsdp"):
        load_config(None, ["learner.num_workers=2"])
    assert load_config(None, ["learner.num_workers=2", "learner.backend=fsdp"]).learner.num_workers == 2


def test_data_range_checked():
    with pytest.raises(ConfigError, match="max_operand"):
        load_config(None, ["data.min_operand=10", "data.max_operand=5"])


def test_recipe_exits_nonzero_on_typo():
    proc = subprocess.run([sys.executable, str(ROOT / "recipes" / "arithmetic_grpo.py"), "--config", str(RECIPE),
                           "rollout.batch_szie=3"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "rollout.batch_szie" in proc.stderr and "rollout.batch_size" in proc.stderr


def test_gpu_only_options_are_rejected_on_cpu():
    with pytest.raises(ConfigError, match="sync.transport=nccl needs GPUs"):
        load_config(None, ["sync.transport=nccl", "model.backend=vllm"])
    with pytest.raises(ConfigError, match="tensor_parallel_size > 1 needs model.backend=vllm"):
        load_config(None, ["rollout.tensor_parallel_size=2", "cluster.n_gpus_per_node=2"])


def test_openai_agent_needs_its_function():
    with pytest.raises(ConfigError, match="OpenAIAgent runs agent.fn; set agent.fn="):
        load_config(None, ["rollout.workflow=rayrl.workflows.openai_agent:OpenAIAgent"])
    cfg = load_config("recipes/calculator_agent.yaml")
    assert cfg.agent.wants_gateway(cfg.rollout.workflow) and not cfg.agent.wants_gateway("rayrl.workflows.rlvr:SingleTurn")
