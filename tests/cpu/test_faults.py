"""Chaos: rollout workers and reward actors killed mid-run come back and the run finishes with
nothing lost or doubled; a killed learner rank stops the run naming the checkpoint to resume from."""

from __future__ import annotations

import time

import pytest
import ray

from rayrl.faults import RunStopped
from tests.cpu.kill_mid_run import Run, _lines


def test_killed_rollout_worker_and_reward_actor_come_back(ray_cluster, make_cfg):
    # η = 0: every trained token comes from the learner's current version, so the fresh log-prob check
    # below covers every sample, the restarted worker's first ones included
    run = Run(make_cfg("metrics.run_name=chaos", "learner.total_steps=10", "rollout.max_staleness=0",
                       "rollout.num_workers=2", "sync.timeout_s=30"))
    killed_at = run.kill_at(2, "rollout-0")
    run.kill_at(6, "reward-0")
    summary = run.finish()
    assert run.error is None, run.error
    assert summary["steps"] == 10 and summary["rollout_restarts"] == [1, 0]
    g = summary["groups"]
    assert g["produced"] == g["trained"] + g["unused"] + g["failed"] + g["dropped_stale"] + g["equal_rewards"] and g["trained"] == 10 * 8
    trained = _lines(run.dir / "trained.jsonl")
    ids = [t for rec in trained for t in rec["tasks"]]
    assert len(ids) == len(set(ids)) == 80, "a task was trained twice or a step lost groups"
    # the restarted worker generated only after it had the current weights: its first groups carry the
    # version of that moment (not the initial 0), and every step's fresh tokens match the learner's log-probs
    first = next((rec["step"], v) for rec in trained for w, v in zip(rec["workers"], rec["versions"])
                 if w == "rollout-0 restart 1")
    assert first[0] >= killed_at and first[1] == first[0] - 1, f"restarted worker's first group: (step, version) {first}"
    diffs = [r["mismatch_max"] for r in _lines(run.dir / "metrics.jsonl") if "step" in r]
    assert len(diffs) == 10 and max(diffs) <= 1e-5, diffs


def test_killed_learner_stops_the_run_naming_the_checkpoint_and_resume_finishes_it(ray_cluster, make_cfg):
    cfg = make_cfg("metrics.run_name=learner-death", "learner.total_steps=6", "rollout.max_staleness=1",
                   "checkpoint.every_steps=2")
    run = Run(cfg)
    run.kill_at(3, "learner-0")
    run.join(60)
    assert not run.is_alive(), "the run did not stop within 60 s of its learner's death"
    assert isinstance(run.error, RunStopped), repr(run.error)
    assert "learner rank 0 died" in str(run.error) and "step-00000002" in str(run.error), str(run.error)
    summary = Run(cfg).finish()  # checkpoint.resume=auto (the default)
    assert summary["resumed_from"].endswith("step-00000002") and summary["steps"] == 6
    ids = [t for rec in _lines(run.dir / "trained.jsonl") for t in rec["tasks"]]
    assert len(ids) == len(set(ids)) == 6 * 8


@ray.remote(num_cpus=0)
class _Stuck:
    def receive(self, seconds: float) -> None:
        time.sleep(seconds)


def test_a_sync_step_that_does_not_finish_in_time_fails_naming_the_worker(ray_cluster):
    """What the broadcaster does with every part of a sync: a hang becomes an error of the role's type naming who
    hung (the driver restarts a rollout worker, stops on a learner rank)."""
    from rayrl.faults import LearnerFailed, RolloutFailed, wait_all

    quick, stuck = _Stuck.remote(), _Stuck.remote()
    with pytest.raises(RolloutFailed, match=r"weight sync to version 3 did not finish within 2s on rollout-1$") as late:
        wait_all([quick.receive.remote(0), stuck.receive.remote(60)], ["learner-0", "rollout-1"],
                 "weight sync to version 3", timeout_s=2, failure=[LearnerFailed, RolloutFailed])
    assert late.value.name == "rollout-1"
    ray.kill(stuck)
    with pytest.raises(LearnerFailed, match="weight sync to version 3 failed on learner-1: ActorDiedError"):
        wait_all([quick.receive.remote(0), stuck.receive.remote(0)], ["learner-0", "learner-1"],
                 "weight sync to version 3", timeout_s=30, failure=LearnerFailed)
    ray.kill(quick)


def test_killed_buffer_stops_the_run_in_one_line_naming_it_and_the_checkpoint(ray_cluster, make_cfg):
    """The buffer holds the prompt queue and every finished group: its death is not survived but stops the run at
    once, one line naming it and the checkpoint a default run wrote after its first step."""
    run = Run(make_cfg("metrics.run_name=buffer-death", "learner.total_steps=20"))
    run.kill_at(2, "buffer")
    killed = time.monotonic()
    run.join(60)
    assert not run.is_alive(), "the run did not stop within 60 s of its buffer's death"
    assert isinstance(run.error, RunStopped), repr(run.error)
    message = str(run.error)
    assert "\n" not in message and "trajectory buffer died" in message and "step-00000001" in message, message
    assert time.monotonic() - killed <= 60
