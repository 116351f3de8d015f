"""On-policy distillation on the real Ray cluster: the mixed loss (task reward and teacher) runs by config while the
teacher is slow on its first calls and is killed mid-run; its failures are counted, the groups they touched are
generated again, and no batch is trained without the teacher's log-probs (the learner refuses one). Held-out groups
(evaluation, never trained on) reach the reward function but not the teacher."""

from __future__ import annotations

import json
from pathlib import Path

import ray

from rayrl.actors.reward import RewardActor
from rayrl.actors.teacher import TeacherActor
from rayrl.demo import prepare_models
from rayrl.trainer import train
from tests.cpu.kill_mid_run import kill_once_restarted


def test_a_slow_then_killed_teacher_is_counted_and_the_mixed_run_finishes(ray_cluster, make_cfg):
    name = "distill-faults"
    teacher = prepare_models(make_cfg()).policy  # the student itself: its scores are the student's log-probs at start
    cfg = make_cfg("teacher.enabled=true", f"teacher.path={teacher}", "teacher.engine=tests.cpu.faulty_teacher:SlowFirstCalls",
                   "teacher.timeout_s=1.0", "algorithm.reward_coef=1.0", "algorithm.distill_coef=1.0",
                   "reward.max_failure_fraction=1.0", "rollout.min_idle_groups=512", "learner.total_steps=4",
                   f"metrics.run_name={name}")  # idle batches: the slow spells fail every group for seconds
    pids: list[int] = []
    killer = kill_once_restarted("teacher-0", f"rayrl-{name}", lambda s: s["engine_calls"] >= 4, pids)
    summary = train(cfg)
    killer.join(timeout=10)
    steps = [r for r in map(json.loads, (Path(summary["run_dir"]) / "metrics.jsonl").read_text().splitlines())
             if "step" in r]
    failures, ledger = summary["reward_failures"], summary["groups"]
    assert len(pids) == 2, "the teacher was not killed and restarted during the run"
    assert len(steps) == 4 and ledger["trained"] == 4 * 8
    assert failures["teacher_timeout"] > 0, failures  # the first calls of each teacher process
    assert ledger["failed"] > 0  # the groups the teacher left unscored, generated again
    # every trained batch carried the teacher's log-probs (a batch without them raises in the learner)
    assert all("distill_reverse_kl" in s for s in steps) and sum(s["teacher_engine_calls"] for s in steps) > 0
    assert summary["eval_accuracy_after"] >= 0.0
    examples = json.loads((Path(summary["run_dir"]) / "reward_failures.json").read_text())["examples"]
    assert "teacher.timeout_s=1.0" in examples["teacher_timeout"][0]


def test_held_out_groups_are_scored_without_the_teacher(ray_cluster, make_cfg, random_groups):
    cfg = make_cfg("teacher.enabled=true", f"teacher.path={prepare_models(make_cfg()).policy}")
    teacher = TeacherActor.remote(cfg.teacher, cfg.rollout.temperature, False)
    reward = RewardActor.remote(cfg, teacher=teacher)
    groups = random_groups(2, 4, seed=6, same_prompt=True)
    held_out = ray.get(reward.score_many.remote(groups, teach=False))
    assert ray.get(teacher.stats.remote())["samples"] == 0
    assert all(s.teacher_logprobs is None and s.reward_status for g in held_out for s in g.samples)
    trained = ray.get(reward.score_many.remote(groups))
    assert ray.get(teacher.stats.remote())["samples"] == 8
    assert all(len(s.teacher_logprobs) == len(s.completion_ids) for g in trained for s in g.samples)
    ray.kill(reward), ray.kill(teacher)
