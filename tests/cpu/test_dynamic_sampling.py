"""DAPO's dynamic sampling on the real pipeline: groups whose rewards are all equal never reach the
learner; they are counted, the batch is filled from further prompts, and the ledger balances."""

from __future__ import annotations

import json
from pathlib import Path


def test_groups_with_equal_rewards_are_dropped_counted_and_replaced(ray_cluster, make_cfg):
    from rayrl.trainer import train

    cfg = make_cfg("algorithm.dynamic_sampling=true", "learner.total_steps=3", "data.eval_size=8",
                   "metrics.run_name=dynamic-sampling")
    summary = train(cfg)
    g = summary["groups"]
    assert g["equal_rewards"] > 0, g  # most groups of this model have equal rewards (measured: ~70 %)
    assert g["trained"] == 3 * 8 and g["produced"] == g["trained"] + g["unused"] + g["failed"] + \
        g["dropped_stale"] + g["equal_rewards"], g
    steps = [json.loads(x) for x in (Path(cfg.metrics.run_dir) / cfg.metrics.run_name / "metrics.jsonl")
             .read_text().splitlines() if '"step"' in x]
    assert [s["equal_reward_groups"] for s in steps] == [0.0, 0.0, 0.0]
