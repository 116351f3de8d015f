"""What can be checked before Ray starts is checked before Ray starts: the reward function imports and
takes (sample, task), the workflow class and agent function import, the files the config names exist, the run directory can be one, the cluster at
scheduler.address answers. Each failure is a ConfigError naming the key, the value and what is expected."""

from __future__ import annotations

import inspect
import os
import socket
from pathlib import Path

from rayrl.config import Config, ConfigError
from rayrl.imports import load_object
from rayrl.rewards.registry import load_reward_fn


def check_reward_fn(spec: str) -> None:
    """Importable here, from sys.path or the working directory (as the reward actors will import it)."""
    try:
        fn = load_reward_fn(spec, [os.getcwd()])
    except ValueError as err:
        raise ConfigError(str(err)) from None
    try:
        inspect.signature(fn).bind(None, None)
    except TypeError:
        raise ConfigError(f"reward.fn '{spec}' must take two arguments (sample, task); its signature is "
                          f"{inspect.signature(fn)}") from None
    except ValueError:  # a builtin without a signature: it will tell at call time
        pass


def check_workflow(cfg: Config) -> None:
    """rollout.workflow names a class with arun_episode; agent.fn (OpenAIAgent) an async function."""
    try:
        cls = load_object(cfg.rollout.workflow, "rollout.workflow", [os.getcwd()], "class")
        fn = load_object(cfg.agent.fn, "agent.fn", [os.getcwd()], "function") if cfg.agent.fn else None
    except ValueError as err:
        raise ConfigError(str(err)) from None
    if not inspect.isclass(cls) or not inspect.iscoroutinefunction(getattr(cls, "arun_episode", None)):
        raise ConfigError(f"rollout.workflow '{cfg.rollout.workflow}' must be a class with "
                          "`async def arun_episode(self, engine, task)` (see rayrl.workflows.base.Workflow)")
    if fn is not None and not inspect.iscoroutinefunction(fn):
        raise ConfigError(f"agent.fn '{cfg.agent.fn}' must be an async function (client, task) -> reward or None")


def check_paths(cfg: Config) -> None:
    if cfg.model.path is not None and not (Path(cfg.model.path).expanduser() / "config.json").is_file():
        raise ConfigError(f"model.path '{cfg.model.path}' is not a Hugging Face model directory (no config.json); "
                          "expected a local directory, or leave it unset to build the small model")
    if cfg.data.task == "gsm8k" and cfg.data.path is not None and not Path(cfg.data.path).expanduser().is_file():
        raise ConfigError(f"data.path '{cfg.data.path}' is not a file; expected a jsonl of question / answer lines")
    run_dir = Path(cfg.metrics.run_dir).expanduser()
    for parent in (run_dir, *run_dir.parents):
        if parent.exists():
            if not parent.is_dir():
                raise ConfigError(f"metrics.run_dir '{cfg.metrics.run_dir}': '{parent}' is a file, not a directory")
            break


def check_address(cfg: Config) -> None:
    """scheduler.type=ray with host:port: a TCP connection to the GCS within scheduler.connect_timeout_s."""
    s = cfg.scheduler
    if s.type != "ray" or s.address == "auto" or s.address.startswith("ray://"):
        return
    host, _, port = s.address.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"scheduler.address '{s.address}' must be host:port (the head's GCS), 'auto' or ray://...")
    try:
        socket.create_connection((host, int(port)), timeout=s.connect_timeout_s).close()
    except OSError as err:
        raise ConfigError(f"scheduler.address '{s.address}': no Ray cluster answers there within "
                          f"{s.connect_timeout_s}s ({err}); start one with `ray start --head` or fix the address") from None


def preflight(cfg: Config) -> None:
    check_reward_fn(cfg.reward.fn)
    check_workflow(cfg)
    check_paths(cfg)
    check_address(cfg)
