"""A reward function that raises, hangs, returns NaN / inf / a wrong type or a numpy scalar: the run
finishes, or stops when its reward fails on every call, with the counts and reasons in summary.json,
metrics.jsonl and reward_failures.json; after a temporary hang samples are scored again."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest

from rayrl.trainer import train

ROOT = Path(__file__).resolve().parents[2]

FAST = ["data.eval_size=8", "reward.timeout_s=0.5", "reward.failure_window=32", "learner.total_steps=3"]


def _steps(cfg) -> list[dict]:
    lines = (Path(cfg.metrics.run_dir) / cfg.metrics.run_name / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if "step" in r]


@pytest.mark.parametrize("fn, reasons", [("fails_sometimes", ("error", "non_finite", "wrong_type")),
                                         ("hangs_first_calls", ("timeout",)), ("numpy_scalar", ())])
def test_run_finishes_counting_failures_by_reason(ray_cluster, make_cfg, fn, reasons):
    cfg = make_cfg(*FAST, f"reward.fn=tests.cpu.faulty_rewards:{fn}", "reward.max_failure_fraction=1.0",
                   f"metrics.run_name=reward-{fn}")
    summary = train(cfg)
    failures = summary["reward_failures"]
    steps = _steps(cfg)
    assert len(steps) == 3 and all(math.isfinite(s["loss"]) for s in steps)
    assert {k for k, v in failures.items() if v} == set(reasons), failures  # a numpy float32 is a reward like any
    examples = json.loads((Path(summary["run_dir"]) / "reward_failures.json").read_text())["examples"]
    for reason in reasons:
        # per step in metrics.jsonl, counted so far (the summary adds what was scored after: the evaluation)
        assert 0 < steps[-1]["reward_failures"][reason] <= failures[reason]
        assert examples[reason], examples
    if fn == "hangs_first_calls":  # four calls hung; every call after them was scored
        assert failures["timeout"] == 4 and "took longer than 0.5s" in examples["timeout"][0]


@pytest.mark.parametrize("fn, reason", [("always_raises", "error"), ("hangs_always", "timeout"),
                                        ("returns_string", "wrong_type"), ("returns_none", "wrong_type")])
def test_a_reward_that_always_fails_stops_the_recipe(ray_cluster, model_cache, tmp_path, capsys, fn, reason):
    """The arithmetic recipe as shipped (dynamic sampling on, its failure window and timeouts), through the CLI:
    a reward function that fails on every call stops the run within 60 s of its first failure, exit code 1, one
    line naming the function and the reason, no traceback; never a run that only looks slow."""
    from rayrl.cli import main

    with pytest.raises(SystemExit) as stop:
        main(["train", "--config", str(ROOT / "recipes" / "arithmetic_grpo.yaml"),
              f"reward.fn=tests.cpu.faulty_rewards:{fn}", f"demo.cache_dir={model_cache}", f"metrics.run_dir={tmp_path}",
              "metrics.run_name=always", "metrics.progress=false", "scheduler.include_dashboard=false"])
    stopped_at = time.time()
    err = capsys.readouterr().err
    assert stop.value.code == 1, err[-2000:]
    message = [line for line in err.splitlines() if line.startswith("rayrl: ")]
    assert len(message) == 1 and f"reward function tests.cpu.faulty_rewards:{fn} failed" in message[0], err[-2000:]
    assert f"{reason} " in message[0] and "Traceback" not in err
    first = json.loads((tmp_path / "always" / "reward_failures.json").read_text())["first_failure"]
    assert stopped_at - first <= 60, f"stopped {stopped_at - first:.0f}s after the first failure"
