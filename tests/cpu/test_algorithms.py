"""Every algorithm.type trains on the real pipeline: finite losses and gradients, the learner's version
advancing, on a few steps of the arithmetic recipe (whether each one learns is a benchmark's question)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from rayrl.config import TYPE_DEFAULTS
from rayrl.trainer import train


@pytest.mark.parametrize("kind", sorted(TYPE_DEFAULTS))
def test_each_algorithm_type_trains_without_nan(ray_cluster, make_cfg, kind):
    cfg = make_cfg(f"algorithm.type={kind}", "learner.total_steps=3", "data.eval_size=8",
                   f"metrics.run_name=algorithm-{kind}")
    summary = train(cfg)
    steps = [json.loads(x) for x in (Path(cfg.metrics.run_dir) / cfg.metrics.run_name / "metrics.jsonl").read_text()
             .splitlines() if '"step"' in x]
    assert summary["steps"] == 3 and [s["version"] for s in steps] == [1, 2, 3]
    assert all(math.isfinite(s["loss"]) and math.isfinite(s["grad_norm"]) for s in steps), steps
    # the mismatch gauges reach the summary; in fp32 the HF engine and the learner agree to rounding
    assert summary["mismatch"]["mismatch_tokens"] > 0 and summary["mismatch"]["mismatch_abs_mean"] <= 1e-5
    if kind == "ppo":
        assert all(math.isfinite(s["critic_loss"]) for s in steps)
