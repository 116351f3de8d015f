"""Shared fixtures: a tiny config with a model cache private to the test run, and one Ray cluster."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from rayrl.config import Config, load_config
from rayrl.types import Sample, Task, TrajectoryGroup

ROOT = Path(__file__).resolve().parents[1]
# the calculator agent's model, warmed up for the tool-call format only (the recipe's 350 steps also teach the
# arithmetic that benchmarks.performance.recipe_run measures learning on): one build, shared by every test that runs the agent
AGENT_BUILD = ["demo.warmup_steps=250"]


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="session")
def make_cfg(model_cache, tmp_path_factory):
    """make_cfg("rollout.batch_size=4", ...) -> Config sized for tests, runs under a tmp dir. Dynamic
    sampling is off unless a test turns it on: its replacement prompts made short test runs slower."""
    runs = tmp_path_factory.mktemp("runs")

    def make(*overrides: str) -> Config:
        base = [f"demo.cache_dir={model_cache}", f"metrics.run_dir={runs}", "metrics.progress=false",
                "rollout.batch_size=8", "rollout.group_size=4", "learner.total_steps=3",
                "data.eval_size=40", "checkpoint.save_final=false", "algorithm.dynamic_sampling=false"]
        return load_config(None, base + list(overrides))

    return make


@pytest.fixture(scope="session")
def agent_cfg(model_cache, tmp_path_factory):
    """agent_cfg(...) -> the calculator-agent recipe's config (its model built once per test run)."""
    runs = tmp_path_factory.mktemp("agent-runs")

    def make(*overrides: str) -> Config:
        return load_config(ROOT / "recipes" / "calculator_agent.yaml", [
            f"demo.cache_dir={model_cache}", f"metrics.run_dir={runs}", "metrics.progress=false",
            "checkpoint.save_final=false", "scheduler.include_dashboard=false", *AGENT_BUILD, *overrides])

    return make


@pytest.fixture(scope="session")
def ray_cluster():
    """One real local Ray cluster for the whole pytest run (never `ray stop`)."""
    import ray

    ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def random_groups():
    """random_groups(n_groups, group_size, seed) -> scored groups of random tokens and lengths."""
    return _random_groups


def _random_groups(n_groups: int, group_size: int, seed: int = 0, same_prompt: bool = False) -> list[TrajectoryGroup]:
    """same_prompt: a group's samples share one prompt (GRPO's groups), else each draws its own."""
    rng = random.Random(seed)
    groups = []
    for g in range(n_groups):
        samples = []
        draw = lambda: [1] + [rng.randrange(4, 16) for _ in range(rng.randrange(3, 7))]  # noqa: E731
        shared = draw() if same_prompt else None  # drawn only then: other tests keep their groups
        for i in range(group_size):
            prompt = shared or draw()
            comp = [rng.randrange(4, 16) for _ in range(rng.randrange(1, 6))] + [2]
            samples.append(Sample(f"{g}", prompt, comp, [-rng.random() for _ in comp], [0] * len(comp), "stop",
                                  reward=float(rng.random() < 0.5)))
        groups.append(TrajectoryGroup(Task(f"{g}", "", "0"), samples))
    return groups
