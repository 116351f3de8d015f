"""An asynchronous run on the real Ray pipeline whose held-out accuracy and sampled reward rise.

The bars are about half (held-out) and three fifths (reward) of the smallest gains of three repeats of
this very run with the defaults (150 steps, dynamic sampling; `python -m benchmarks.learning_repeats
--runs 3`, learning_repeats-20261201-124111.json: held-out gains 0.285-0.325, reward gains 0.139-0.147).
"""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.learning_repeats import STEPS, TEST_RUN, reward_ends
from rayrl.trainer import train

EVAL_GAIN = 0.14  # held-out greedy accuracy, after minus before
REWARD_GAIN = 0.08  # mean sampled reward (dropped groups included), last 25 steps minus first 25


def test_run_learns(ray_cluster, make_cfg):
    """Held-out greedy accuracy (200 problems) rises by EVAL_GAIN and the sampled reward by REWARD_GAIN,
    with staleness within η = 1, no reward failures, and a complete run directory."""
    cfg = make_cfg(*TEST_RUN, "metrics.run_name=learns")
    summary = train(cfg)
    before, after = summary["eval_accuracy_before"], summary["eval_accuracy_after"]
    assert after >= before + EVAL_GAIN, f"held-out accuracy {before:.3f} -> {after:.3f}, want +{EVAL_GAIN}"
    assert not any(summary["reward_failures"].values()), summary["reward_failures"]
    run = Path(cfg.metrics.run_dir) / "learns"
    steps = [x for x in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if "step" in x]
    assert len(steps) == STEPS and max(s["staleness_max"] for s in steps) <= 1
    first, last = reward_ends(run)
    assert last >= first + REWARD_GAIN, f"sampled reward {first:.3f} -> {last:.3f}, want +{REWARD_GAIN}"
    assert json.loads((run / "summary.json").read_text())["steps"] == STEPS
