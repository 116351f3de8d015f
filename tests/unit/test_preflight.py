"""Config errors found before Ray starts: one message naming the key and value, exit code 2, no traceback."""

import subprocess
import sys

import pytest

from rayrl.config import ConfigError, load_config
from rayrl.preflight import preflight
from rayrl.trainer import Trainer


def two_args(sample, task):
    return 1.0


def one_arg(sample):
    return 1.0


@pytest.mark.parametrize("overrides, match", [
    (["reward.fn=no_such_module_xyz:f"], "cannot import module 'no_such_module_xyz'"),
    (["reward.fn=tests.unit.test_preflight:missing"], "has no function 'missing'"),
    ([f"reward.fn={__name__}:one_arg"], r"must take two arguments \(sample, task\)"),
    (["model.path=/nonexistent/model"], "model.path '/nonexistent/model' is not a Hugging Face model directory"),
    (["data.task=gsm8k", "data.path=/nonexistent.jsonl"], "data.path '/nonexistent.jsonl' is not a file"),
    (["scheduler.type=ray", "scheduler.address=127.0.0.1:1"], "scheduler.address '127.0.0.1:1': no Ray cluster"),
    (["scheduler.type=ray", "scheduler.address=nohostport"], "must be host:port"),
    (["rollout.workflow=rayrl.workflows.rlvr:Nope"], "rollout.workflow 'rayrl.workflows.rlvr:Nope': module "
                                                     "'rayrl.workflows.rlvr' has no class 'Nope'"),
    ([f"rollout.workflow={__name__}:two_args"], "must be a class with `async def arun_episode"),
    (["rollout.workflow=rayrl.workflows.openai_agent:OpenAIAgent", f"agent.fn={__name__}:two_args"],
     "agent.fn '.*' must be an async function"),
    (["rollout.workflow=rayrl.workflows.openai_agent:OpenAIAgent", "agent.fn=nomod_xyz:agent"],
     "agent.fn 'nomod_xyz:agent': cannot import module"),
])
def test_preflight_names_the_key(overrides, match):
    with pytest.raises(ConfigError, match=match):
        preflight(load_config(None, overrides))


def test_run_dir_that_is_a_file(tmp_path):
    (tmp_path / "runs").write_text("not a directory")
    with pytest.raises(ConfigError, match="is a file, not a directory"):
        preflight(load_config(None, [f"metrics.run_dir={tmp_path / 'runs' / 'deeper'}"]))


def test_an_unimportable_reward_fails_before_any_model_is_built(tmp_path):
    cfg = load_config(None, ["reward.fn=no_such_module_xyz:f", f"demo.cache_dir={tmp_path}/models",
                             f"metrics.run_dir={tmp_path}/runs"])
    with pytest.raises(ConfigError, match="reward.fn"):
        Trainer(cfg)
    assert not (tmp_path / "models").exists() and not (tmp_path / "runs").exists()
    preflight(load_config(None, [f"reward.fn={__name__}:two_args"]))  # a good one passes


@pytest.mark.parametrize("args, message", [
    (["train", "reward.fn=no_such_module_xyz:f"], "cannot import module"),
    (["train", "rollout.batch_size=true"], "bad value for 'rollout.batch_size'"),
    (["check-config", "rollout.group_size=1"], "rollout.group_size must be >= 2"),
    (["check-config", "scheduler.type=ray", "scheduler.address=127.0.0.1:1"], "no Ray cluster answers"),
])
def test_cli_exits_2_with_one_message(args, message, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "rayrl.cli", *args, f"metrics.run_dir={tmp_path}"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_a_callers_own_tasks_replace_the_data_sections_and_are_checked():
    from rayrl.types import Task

    cfg = load_config(None, [])
    train = [Task(f"t{i}", f"{i}+1=", str(i + 1)) for i in range(4)]
    held = [Task("h0", "7+1=", "8")]
    assert preflight(cfg, (train, held)) == (train, held)
    with pytest.raises(ConfigError, match=r"tasks must be \(train, held_out\): two lists of rayrl.types.Task"):
        preflight(cfg, train)
    with pytest.raises(ConfigError, match="the training list is empty"):
        preflight(cfg, ([], held))
    with pytest.raises(ConfigError, match=r"task ids repeat \(e.g. 't1'\)"):
        preflight(cfg, (train, [Task("t1", "1+1=", "2")]))
