"""Real local Ray cluster, real actors, a tiny local model: weight sync, rewards, buffer, learning."""

from __future__ import annotations

import json

import pytest
import ray

from rayrl.trainer import Trainer, train
from rayrl.types import GroupMeta, Task


@pytest.fixture(scope="module")
def trainer(ray_cluster, make_cfg):
    t = Trainer(make_cfg("model.build.warmup_steps=60", "metrics.run_name=sync-check"))
    t.setup()
    yield t
    t.close()


def test_actors_have_role_names(trainer):
    from ray.util.state import list_actors

    names = {a.name for a in list_actors(filters=[("state", "=", "ALIVE")])}
    assert {"rollout-0", "reward-0", "learner-0", "buffer", "broadcaster"} <= names


def test_rollout_logprobs_match_learner_after_every_sync(trainer):
    """After each weight sync, fresh rollouts' behaviour log-probs equal the learner's (fp32, 1e-5)."""
    tasks = trainer.train_tasks[:8]
    rollout, learner, reward = trainer.rollouts[0], trainer.learners.rank0, trainer.rewards[0]
    for version in range(1, 4):
        groups = ray.get(rollout.generate_groups.remote(tasks, 4, 1.0))
        assert all(v == version - 1 for g in groups for s in g.samples for v in s.versions)
        learner_lp = ray.get(learner.completion_logprobs.remote(groups))
        rollout_lp = [s.logprobs for g in groups for s in g.samples]
        assert [len(a) for a in learner_lp] == [len(b) for b in rollout_lp]
        worst = max(abs(a - b) for la, lb in zip(learner_lp, rollout_lp) for a, b in zip(la, lb))
        assert worst <= 1e-5, f"version {version - 1}: max |rollout - learner| log-prob = {worst}"
        refs = [reward.score.remote(g) for g in groups]
        stats = trainer.learners.train([([r], GroupMeta(g.task.id, 0, 4)) for r, g in zip(refs, groups)])
        assert stats["version"] == version
        synced = ray.get(trainer.broadcaster.sync.remote(version))
        assert synced.version == version and synced.n_bytes > 0
        # not vacuous: after the update the same tokens score differently, so a stale copy would fail
        after = ray.get(learner.completion_logprobs.remote(groups))
        moved = max(abs(a - b) for la, lb in zip(after, rollout_lp) for a, b in zip(la, lb))
        assert moved > 1e-4, "training did not change the weights"


def test_reward_errors_are_counted_zeros(trainer):
    bad = Task(id="bad", prompt="1+1=", answer="not-a-number")  # int(answer) raises inside the reward fn
    group = ray.get(trainer.rollouts[0].generate_groups.remote([bad], 2, 0.0))[0]
    group.samples[0].text, group.samples[0].finish_reason = "2", "stop"
    before = ray.get(trainer.rewards[0].stats.remote()).get("error", 0)
    scored = ray.get(trainer.rewards[0].score.remote(group))
    assert scored.samples[0].reward == 0.0 and scored.samples[0].reward_status == "error"
    assert "ValueError" in scored.samples[0].reward_reason
    assert ray.get(trainer.rewards[0].stats.remote())["error"] >= before + 1


def test_short_run_learns(ray_cluster, make_cfg):
    """A short asynchronous run: held-out greedy accuracy rises, and the run directory is complete."""
    cfg = make_cfg("model.build.warmup_steps=250", "learner.total_steps=100", "rollout.batch_size=32",
                   "rollout.group_size=8", "data.eval_size=200", "rollout.max_staleness=1",
                   "metrics.run_name=learns")
    summary = train(cfg)
    assert summary["eval_accuracy_after"] >= summary["eval_accuracy_before"] + 0.05, summary
    assert summary["reward_failures"] == {"error": 0, "timeout": 0}
    run = cfg.metrics.run_dir + "/learns"
    lines = [json.loads(x) for x in open(f"{run}/metrics.jsonl")]
    steps = [x for x in lines if "step" in x]
    assert len(steps) == 100 and max(s["staleness_max"] for s in steps) <= 1
    first = sum(s["reward_mean"] for s in steps[:20]) / 20
    last = sum(s["reward_mean"] for s in steps[-20:]) / 20
    assert last > first, (first, last)
    assert json.load(open(f"{run}/summary.json"))["steps"] == 100
