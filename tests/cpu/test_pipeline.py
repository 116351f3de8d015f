"""Real local Ray cluster, real actors, a tiny local model: weight sync, rewards, buffer, learning."""

from __future__ import annotations

import time

import pytest
import ray

from rayrl.data import load_tasks
from rayrl.demo import prepare_models
from rayrl.driver import ActorSystem
from rayrl.actors import TrajectoryBuffer
from rayrl.group_refs import get_groups, put_groups
from rayrl.types import GroupMeta, Sample, Task, TrajectoryGroup


@pytest.fixture(scope="module")
def system(ray_cluster, make_cfg):
    cfg = make_cfg()
    s = ActorSystem(cfg, "sync-check", models=prepare_models(cfg))
    yield s
    s.close()


def test_actors_have_role_names(system):
    for name in ("rollout-0", "reward-0", "learner-0", "buffer", "broadcaster"):
        assert ray.get_actor(name, namespace=system.namespace) is not None


def test_rollout_logprobs_match_learner_after_every_sync(system):
    """After each weight sync, fresh rollouts' behaviour log-probs equal the learner's (fp32, 1e-5)."""
    tasks = load_tasks(system.cfg.data)[0][:16]
    rollout, learner, reward = system.rollouts[0], system.learners.rank0, system.rewards[0]
    for version in range(1, 4):
        groups = ray.get(rollout.generate_groups.remote(tasks, 4, system.cfg.rollout.temperature))
        assert all(v == version - 1 for g in groups for s in g.samples for v in s.versions)
        learner_lp = ray.get(learner.completion_logprobs.remote(groups))
        rollout_lp = [s.logprobs for g in groups for s in g.samples]
        assert [len(a) for a in learner_lp] == [len(b) for b in rollout_lp]
        worst = max(abs(a - b) for la, lb in zip(learner_lp, rollout_lp) for a, b in zip(la, lb))
        assert worst <= 1e-5, f"version {version - 1}: max |rollout - learner| log-prob = {worst}"
        refs = [reward.score.remote(g) for g in groups]
        rewards = [[s.reward for s in g.samples] for g in ray.get(refs)]
        assert any(len(set(r)) > 1 for r in rewards), "no group with mixed rewards: nothing to learn from"
        result = system.learners.train([[r] for r in refs])
        assert result.stats["version"] == version and result.returns is None
        synced = ray.get(system.broadcaster.sync.remote())
        assert synced.version == version and synced.n_bytes > 0
        assert ray.get(system.buffer.stats.remote())["version"] == version  # the broadcaster told the buffer
        # not vacuous: after the update the same tokens score differently, so a stale copy would fail
        after = ray.get(learner.completion_logprobs.remote(groups))
        moved = max(abs(a - b) for la, lb in zip(after, rollout_lp) for a, b in zip(la, lb))
        assert moved > 1e-4, "training did not change the weights"


def test_reward_errors_are_counted_zeros(system):
    bad = Task(id="bad", prompt="1+1=", answer="not-a-number")  # int(answer) raises inside the reward fn
    group = ray.get(system.rollouts[0].generate_groups.remote([bad], 2, 0.0))[0]
    group.samples[0].text, group.samples[0].finish_reason = "2", "stop"
    before = ray.get(system.rewards[0].stats.remote())["counts"]["error"]
    scored = ray.get(system.rewards[0].score.remote(group))
    assert scored.samples[0].reward == 0.0 and scored.samples[0].reward_status == "error"
    assert "ValueError" in scored.samples[0].reward_reason
    assert ray.get(system.rewards[0].stats.remote())["counts"]["error"] >= before + 1


def test_buffer_drops_a_group_that_came_back_past_the_staleness_bound(ray_cluster):
    """Admission keeps the bound for groups that finish in order; one that comes back late (a slow
    reward, a restarted actor) is not trained off-policy: it is counted and its prompt generated again."""
    buffer = TrajectoryBuffer.remote(batch_size=1, max_staleness=1)
    group = {i: TrajectoryGroup(Task(i, "", ""), []) for i in ("fresh", "old", "late")}
    ray.get(buffer.feed.remote([g.task for g in group.values()]))
    assert [t.id for t in ray.get(buffer.take.remote(0, 3))] == ["fresh", "old"]  # (1 + 0 + 1) * 1 admitted
    ray.get(buffer.put.remote(0, group["fresh"], GroupMeta("fresh", 0)))
    ray.get(buffer.put.remote(0, group["old"], GroupMeta("old", 0)))
    ray.get(buffer.set_version.remote(1))
    (wrapped, meta), = ray.get(buffer.get_batch.remote(1))
    assert meta.task_id == "fresh" and ray.get(wrapped[0]) == group["fresh"]
    ray.get(buffer.set_version.remote(2))
    pending = buffer.get_batch.remote(1)  # "old" is 2 versions behind: dropped, its prompt queued first
    # an async actor may start calls out of order: take() only once get_batch() has dropped "old"
    for _ in range(1000):
        if ray.get(buffer.stats.remote())["dropped_stale"] == 1:
            break
        time.sleep(0.01)
    assert [t.id for t in ray.get(buffer.take.remote(0, 3))] == ["old", "late"]
    ray.get(buffer.put.remote(0, group["old"], GroupMeta("old", 2)))
    (wrapped, meta), = ray.get(pending)
    assert (meta.task_id, meta.version) == ("old", 2)
    stats = ray.get(buffer.stats.remote())
    assert (stats["produced"], stats["trained"], stats["dropped_stale"], stats["leased"]) == (3, 2, 1, 1)
    ray.kill(buffer)


def test_a_hand_overs_groups_share_one_object_and_come_back_in_any_order(ray_cluster):
    buffer = TrajectoryBuffer.remote(batch_size=3, max_staleness=0, drop_equal_rewards=True)
    tasks = [Task(i, "", "") for i in "abc"]
    ray.get(buffer.feed.remote(tasks))
    assert len(ray.get(buffer.take.remote(0, 3))) == 3
    sample = lambda r: Sample("", [1], [2], [-0.1], [0], "stop", reward=r)  # noqa: E731
    groups = [TrajectoryGroup(t, [sample(0.0), sample(float(i != 1))]) for i, t in enumerate(tasks)]  # b: equal
    ray.get(buffer.put_many.remote(0, [(g, GroupMeta(g.task.id, 0)) for g in groups]))
    stats = ray.get(buffer.stats.remote())
    assert (stats["produced"], stats["equal_rewards"], stats["waiting"]) == (3, 1, 2)
    places = [place for place, _ in ray.get(buffer.get_batch.remote(2))]
    assert places[0][0] == places[1][0] and [p[1] for p in places] == [0, 1]  # one object, two positions
    assert get_groups([places[1], places[0], places[1]]) == [groups[2], groups[0], groups[2]]
    assert get_groups(put_groups([groups[1]])) == [groups[1]] and put_groups([]) == []
    ray.kill(buffer)


def test_requeue_gives_back_a_failed_calls_prompts_or_all_a_dead_workers(ray_cluster):
    buffer = TrajectoryBuffer.remote(batch_size=4, max_staleness=0)
    ray.get(buffer.feed.remote([Task(i, "", "") for i in "abcd"]))
    assert [t.id for t in ray.get(buffer.take.remote(0, 3))] == ["a", "b", "c"]
    assert ray.get(buffer.requeue.remote(0, ["b", "z"])) == 1  # a failed call's prompts; unknown ids ignored
    assert [t.id for t in ray.get(buffer.take.remote(1, 2))] == ["b", "d"]
    assert ray.get(buffer.requeue.remote(0)) == 2  # worker 0 died: "a" and "c" go back, in order
    stats = ray.get(buffer.stats.remote())
    assert (stats["queued"], stats["leased"], stats["requeued"], stats["running"]) == (2, 2, 3, 2)
    ray.kill(buffer)


def test_a_dead_workers_pending_take_leases_nothing(ray_cluster):
    """A take() a worker sent before it died may still be waiting in the buffer; once the worker's
    prompts are requeued it must come back empty, not lease prompts nobody will generate; and what that first
    life hands over afterwards (it may still run: a node declared dead too early) is late, dropped and counted."""
    buffer = TrajectoryBuffer.remote(batch_size=1, max_staleness=0)
    ray.get(buffer.feed.remote([Task(i, "", "") for i in "ab"]))
    assert [t.id for t in ray.get(buffer.take.remote(0, 1))] == ["a"]
    ghost = buffer.take.remote(0, 1)  # no capacity until version 1: it waits
    assert ray.get(buffer.requeue.remote(0)) == 1  # worker 0 died
    assert ray.get(ghost) == []
    assert [t.id for t in ray.get(buffer.take.remote(0, 1, 1))] == ["a"]  # its next life
    group = TrajectoryGroup(Task("a", "", ""), [Sample("", [1], [2], [-0.1], [0], "stop", reward=1.0)])
    ray.get(buffer.put_many.remote(0, [(group, GroupMeta("a", 0))], 0))  # the first life, still running: fenced
    ray.get(buffer.fail.remote(0, "a", "late", 0))
    stats = ray.get(buffer.stats.remote())
    assert (stats["late"], stats["produced"], stats["waiting"], stats["failed"], stats["leased"]) == (2, 0, 0, 0, 1)
    ray.get(buffer.put_many.remote(0, [(group, GroupMeta("a", 0))], 1))  # the life that holds the lease
    assert ray.get(buffer.stats.remote())["waiting"] == 1
    ray.kill(buffer)

