"""Learner failover on 2 gloo ranks: a rank SIGKILLed mid-run, the group re-forms from the in-memory copies and the
run finishes with the same per-step metrics and final weights, bit for bit, as a run that never broke (η = 0,
learner.threads=1 and dynamic sampling off: the settings of an exact resume). A PPO critic rank killed: both groups
re-form and the steps since are trained again with the same losses. Both ranks killed at once: their copies are
gone, and the run falls back to its checkpoint on disk, trains nothing twice and finishes."""

from __future__ import annotations

import json
import time

import pytest
import torch
from safetensors.torch import load_file

from tests.cpu.kill_mid_run import Run, _lines, _steps_done, sigkill_when

TIMINGS = {"time", "wait_s", "train_s", "sync_s", "sync_pause_s", "step_s", "samples_per_s", "elapsed_s",
           "sync_hold_s", "sync_pause_engine_s", "sync_pause_settle_s", "sync_pause_queued_tokens"}
STEPS = 20


def _cfg(make_cfg, name: str, backend: list[str], *extra: str):
    return make_cfg(f"metrics.run_name={name}", f"learner.total_steps={STEPS}", "learner.num_workers=2",
                    "learner.threads=1", "rollout.max_staleness=0", "rollout.batch_size=4", "data.eval_size=8",
                    "checkpoint.save_final=true", "sync.timeout_s=60", *backend, *extra)


def _steps(run: Run) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in TIMINGS} for r in _lines(run.dir / "metrics.jsonl") if "step" in r]


def _weights(run: Run) -> dict:
    return load_file(run.dir / "final" / "model.safetensors")


def _trained_once(run: Run) -> list[str]:
    ids = [t for rec in _lines(run.dir / "trained.jsonl") for t in rec["tasks"]]
    assert len(ids) == len(set(ids)) == STEPS * 4, "a task was trained twice or a step lost its groups"
    return ids


@pytest.mark.parametrize("backend", [["learner.backend=fsdp"], ["learner.backend=deepspeed", "learner.zero_stage=2"]],
                         ids=["fsdp2", "deepspeed-zero2"])
def test_a_killed_rank_is_replaced_and_the_run_equals_one_that_never_broke(ray_cluster, make_cfg, backend):
    name = backend[0].split("=")[1]
    straight = Run(_cfg(make_cfg, f"straight-{name}", backend))
    straight.finish()
    assert straight.error is None, straight.error

    run = Run(_cfg(make_cfg, f"killed-{name}", backend))
    killed_after, at = sigkill_when(run, 5, ["learner-1"])
    while _steps_done(run.dir) <= killed_after and run.is_alive():  # the hang guard: training resumes within 60 s
        assert time.monotonic() - at < 60, "no step finished within 60 s of the kill"
        time.sleep(0.1)
    summary = run.finish()
    assert run.error is None, run.error
    assert summary["steps"] == STEPS and summary["checkpoint_fallbacks"] == []
    [rec] = summary["learner_recoveries"]
    assert rec["dead"] == {"learner": [1]} and rec["failed_at_step"] == killed_after + 1, rec
    assert rec["restored_step"] <= killed_after and rec["retrained_equal"], rec
    assert _trained_once(run) == _trained_once(straight)
    assert _steps(run) == _steps(straight)
    a, b = _weights(straight), _weights(run)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_both_ranks_killed_fall_back_to_the_checkpoint_and_train_nothing_twice(ray_cluster, make_cfg):
    run = Run(_cfg(make_cfg, "both-killed", ["learner.backend=fsdp"], "checkpoint.every_steps=4",
                   "learner.total_steps=10", "checkpoint.save_final=false"))
    killed_after, _ = sigkill_when(run, 6, ["learner-0", "learner-1"])
    summary = run.finish()
    assert run.error is None, run.error
    [fallback] = summary["checkpoint_fallbacks"]
    assert fallback["checkpoint_step"] == 4 and "learner rank 0, 1 died" in fallback["cause"], fallback
    assert summary["resumed_from"].endswith("step-00000004") and summary["steps"] == 10
    ids = [t for rec in _lines(run.dir / "trained.jsonl") for t in rec["tasks"]]
    assert len(ids) == len(set(ids)) == 10 * 4
    assert [r["step"] for r in _lines(run.dir / "metrics.jsonl") if "step" in r] == list(range(1, 11))
    assert json.loads((run.dir / "summary.json").read_text())["steps"] == 10


def test_a_killed_critic_rank_re_forms_both_groups(ray_cluster, make_cfg):
    run = Run(make_cfg("metrics.run_name=critic-killed", "algorithm.type=ppo", "learner.backend=fsdp",
                       "learner.num_workers=2", "learner.threads=1", "rollout.max_staleness=0", "rollout.batch_size=4",
                       "data.eval_size=8", "learner.total_steps=8", "learner.failover_every_steps=2",
                       "sync.timeout_s=60"))
    killed_after, _ = sigkill_when(run, 3, ["critic-1"])
    summary = run.finish()
    assert run.error is None, run.error
    [rec] = summary["learner_recoveries"]
    assert rec["dead"] == {"learner": [], "critic": [1]} and rec["failed_at_step"] == killed_after + 1, rec
    assert rec["restored_step"] <= killed_after and rec["restored_step"] % 2 == 0 and rec["retrained_equal"], rec
    ids = [t for r in _lines(run.dir / "trained.jsonl") for t in r["tasks"]]
    assert summary["steps"] == 8 and len(ids) == len(set(ids)) == 8 * 4
