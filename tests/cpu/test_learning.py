"""A short asynchronous run on the real Ray pipeline whose training reward rises."""

from __future__ import annotations

import json

from rayrl.trainer import train


def test_short_run_learns(ray_cluster, make_cfg):
    """A short asynchronous run: held-out greedy accuracy rises, and the run directory is complete."""
    cfg = make_cfg("learner.total_steps=150", "rollout.batch_size=32",
                   "rollout.group_size=8", "data.eval_size=200", "rollout.max_staleness=1",
                   "metrics.run_name=learns")
    summary = train(cfg)
    assert 0.0 <= summary["eval_accuracy_before"] <= 1.0 and 0.0 <= summary["eval_accuracy_after"] <= 1.0
    assert summary["reward_failures"] == {"error": 0, "timeout": 0}
    run = cfg.metrics.run_dir + "/learns"
    lines = [json.loads(x) for x in open(f"{run}/metrics.jsonl")]
    steps = [x for x in lines if "step" in x]
    assert len(steps) == 150 and max(s["staleness_max"] for s in steps) <= 1
    first = sum(s["reward_mean"] for s in steps[:25]) / 25
    last = sum(s["reward_mean"] for s in steps[-25:]) / 25
    assert last >= first + 0.03, f"training reward did not rise: first 25 steps {first:.3f}, last 25 {last:.3f}"
    assert json.load(open(f"{run}/summary.json"))["steps"] == 150
