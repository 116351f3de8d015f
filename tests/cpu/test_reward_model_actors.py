"""Reward models as actors on the real Ray cluster with the demo judge on the hf engine: samples of many groups
share an engine call, held-out accuracy is the rule's while the judge trains, and a judge that is slow,
unparsable or killed mid-run is counted by reason while the run finishes without training on a missing score."""

from __future__ import annotations

import json
from pathlib import Path

from rayrl.trainer import train
from tests.cpu.kill_mid_run import kill_once_restarted

# the demo judge, built for tests with fewer steps than the recipe's (its verdicts, not their quality, are tested)
# (the same build as tests/unit/test_reward_model.py's: one per test run)
JUDGE = ["reward.model.kind=judge", "reward.model.template='{answer} vs {reference}?'", "demo.judge_warmup_steps=1000",
         "reward.model.combine=only"]


def _steps(summary) -> list[dict]:
    lines = (Path(summary["run_dir"]) / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if "step" in r]


def test_a_judge_trains_in_batched_calls_while_the_rule_measures(ray_cluster, make_cfg):
    summary = train(make_cfg(*JUDGE, "learner.total_steps=3", "metrics.run_name=judge"))
    m, steps = summary["reward_model"], _steps(summary)
    assert len(steps) == 3 and m["unparsable"] == 0 and sum(summary["reward_failures"].values()) == 0
    # one engine call per reward actor call at most: groups that finished together share one
    assert 0 < m["engine_calls"] <= m["reward_calls"]
    assert 0 < sum(s["reward_model_engine_calls"] for s in steps) <= sum(s["reward_model_reward_calls"] for s in steps)
    assert m["samples"] >= 3 * 8 * 4  # every trained sample, and those of the evaluations
    # the judge's probability of "y" is the reward; held-out accuracy counts exact matches only
    assert all(0.0 < s["reward_mean"] < 1.0 for s in steps)
    assert len(m["agreement"]) == 2 and all(0.5 <= a <= 1.0 for a in m["agreement"]), m["agreement"]
    acc = summary["eval_accuracy_before"] * 40  # data.eval_size
    assert abs(acc - round(acc)) < 1e-9  # a share of exact matches, not of judge probabilities


def test_a_slow_unparsable_and_killed_judge_is_counted_and_the_run_finishes(ray_cluster, make_cfg):
    name = "judge-faults"
    cfg = make_cfg(*JUDGE, "reward.model.parser=tests.cpu.faulty_verdicts:slow_first_then_unparsable_sometimes",
                   "reward.model.timeout_s=1.0", "reward.max_failure_fraction=1.0", "learner.total_steps=4",
                   f"metrics.run_name={name}")
    pids: list[int] = []
    killer = kill_once_restarted("reward-model-0", f"rayrl-{name}", lambda s: s["engine_calls"] >= 3, pids)
    summary = train(cfg)
    killer.join(timeout=10)
    steps, failures, ledger = _steps(summary), summary["reward_failures"], summary["groups"]
    assert len(pids) == 2, "the judge was not killed and restarted during the run"
    assert len(steps) == 4 and ledger["trained"] == 4 * 8
    assert failures["unparsable"] > 0 and failures["model_timeout"] > 0, failures  # the restarted judge is slow again
    # every group holding a sample without a score was set aside and its prompt generated again, never trained
    assert ledger["failed"] > 0 and ledger["produced"] >= ledger["trained"] + ledger["failed"]
    examples = json.loads((Path(summary["run_dir"]) / "reward_failures.json").read_text())["examples"]
    assert "does not follow the format" in examples["unparsable"][0]
    assert "reward.model.timeout_s=1.0" in examples["model_timeout"][0]
