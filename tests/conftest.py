"""Shared fixtures: a tiny config with a model cache private to the test run, and one Ray cluster."""

from __future__ import annotations

import pytest

from rayrl.config import Config, load_config


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="session")
def make_cfg(model_cache, tmp_path_factory):
    """make_cfg("rollout.batch_size=4", ...) -> Config sized for tests, runs under a tmp dir."""
    runs = tmp_path_factory.mktemp("runs")

    def make(*overrides: str) -> Config:
        base = [f"model.cache_dir={model_cache}", f"metrics.run_dir={runs}", "metrics.progress=false",
                "rollout.batch_size=8", "rollout.group_size=4", "learner.total_steps=3",
                "data.eval_size=40", "checkpoint.save_final=false"]
        return load_config(None, base + list(overrides))

    return make


@pytest.fixture(scope="session")
def ray_cluster():
    """One real local Ray cluster for the whole pytest run (never `ray stop`)."""
    ray = pytest.importorskip("ray")
    ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()
