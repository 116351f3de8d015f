"""The buffer's bookkeeping without Ray: leases by staleness, a dead worker's prompts back in front, stale
groups regenerated, dynamic sampling's drops, and a ledger that balances through all of it."""

from rayrl.buffer import BufferState, Ledger
from rayrl.progress import ProgressLimits
from rayrl.types import GroupMeta, Task


def tasks(n: int, start: int = 0) -> list[Task]:
    return [Task(f"t{i}", f"{i}+0=", str(i)) for i in range(start, start + n)]


def finish(state: BufferState, worker: int, task: Task, version: int = 0) -> None:
    state.accept(worker, f"ref-{task.id}", GroupMeta(task.id, version), task)


def test_leases_follow_the_staleness_bound_and_a_dead_worker_gives_its_prompts_back():
    s = BufferState(batch_size=2, max_staleness=1)  # admits (1 + 0 + 1) * 2 = 4 groups at version 0
    s.feed(tasks(6))
    assert [t.id for t in s.lease(0, 3)] == ["t0", "t1", "t2"]
    assert [t.id for t in s.lease(1, 3)] == ["t3"]  # the bound: 4 running
    assert not s.can_lease()
    assert s.requeue(0) == 3 and s.is_old_life(0, 0)  # worker 0 died: a new life, its prompts in front
    assert [t.id for t in s.prompts][:3] == ["t0", "t1", "t2"]
    assert [t.id for t in s.lease(0, 2)] == ["t0", "t1"]
    assert s.ledger.requeued == 3


def test_batches_take_the_oldest_and_stale_groups_are_generated_again():
    s = BufferState(batch_size=2, max_staleness=0)
    s.feed(tasks(4))
    leased = s.lease(0, 2)
    finish(s, 0, leased[1], version=0)
    finish(s, 0, leased[0], version=0)
    out = s.take_batch(2)
    assert [w.meta.task_id for w in out] == ["t1", "t0"]  # arrival order within a version
    s.staleness.set_version(1)
    late = s.lease(0, 2)
    finish(s, 0, late[0], version=0)  # made by version 0, trained at version 1: past η = 0
    assert s.drop_stale() == 1 and s.prompts[0].id == late[0].id
    assert s.ledger.dropped_stale == 1 and s.ledger.balanced(waiting=len(s.items))


def test_dynamic_sampling_drops_rejections_and_failures_keep_the_ledger_balanced():
    s = BufferState(batch_size=4, max_staleness=0, drop_equal_rewards=True)
    s.feed(tasks(4))
    a, b, c, d = s.lease(0, 4)
    assert s.equal_rewards([1.0, 1.0]) and not s.equal_rewards([0.0, 1.0])
    s.drop_equal(0, a.id, [1.0, 1.0])
    s.reject(0, b.id)
    s.fail(0, c.id)  # generated again: back in the queue
    finish(s, 0, d)
    assert s.ledger == Ledger(produced=4, equal_rewards=1, rejected=1, failed=1, requeued=1)
    assert s.ledger.balanced(waiting=1) and not s.ledger.balanced(waiting=0)
    assert s.take_dropped() == ([a.id, b.id], 2.0, 2) and s.take_dropped() == ([], 0.0, 0)
    assert [t.id for t in s.prompts] == [c.id] and s.staleness.capacity() == 3


def _limits(batch_size: int, idle: int = 2, stall_s: float = 30.0, min_groups: int = 1) -> ProgressLimits:
    return ProgressLimits(batch_size, idle, min_groups, stall_s, "the judge (reward.model.kind=judge)", "my:Workflow")


def test_groups_that_are_never_trainable_stop_the_wait_after_the_bound_naming_the_judge():
    s = BufferState(batch_size=2, max_staleness=0, drop_equal_rewards=True, limits=_limits(2))
    s.feed(tasks(12))
    first = s.lease(0, 2)
    s.fail(0, first[0].id, "2 samples without a reward model score; first: unparsable: 'x' does not parse")
    finish(s, 0, first[1])  # a trainable group: the count starts again
    assert s.no_progress(2, now=0.0) is None
    for _ in range(3):  # each failed group's prompt goes back in front and is generated again
        (t,) = s.lease(0, 1)
        s.fail(0, t.id, f"2 samples without a reward model score; first: unparsable: try {_}")
    assert s.no_progress(2, now=0.0) is None  # 3 of the 2 x 2 = 4 allowed
    (t,) = s.lease(0, 1)
    s.drop_equal(0, t.id, [0.0, 0.0])
    why = s.no_progress(2, now=0.0)
    assert why.startswith("no trainable group among the last 4 finished groups") and "rollout.max_idle_batches=2" in why
    floor = BufferState(batch_size=2, max_staleness=0, limits=_limits(2, min_groups=6)).progress
    for _ in range(5):
        floor.untrainable("unscored", "x")
    assert floor.verdict(None, 0.0) is None  # 2 x 2 = 4 groups, but rollout.min_idle_groups=6
    floor.untrainable("unscored", "x")
    assert "at least rollout.min_idle_groups=6" in floor.verdict(None, 0.0)
    assert "3 had samples that the judge (reward.model.kind=judge) left unscored" in why, why  # the commonest cause
    assert "first: 2 samples without a reward model score; first: unparsable: try 0" in why, why


def test_equal_rewards_under_dynamic_sampling_name_the_key():
    s = BufferState(batch_size=1, max_staleness=3, drop_equal_rewards=True, limits=_limits(1))
    s.feed(tasks(2))
    for t in s.lease(0, 2):
        s.drop_equal(0, t.id, [0.0, 0.0, 0.0])
    why = s.no_progress(1, now=0.0)
    assert "every sample of the group had the same reward (all 0)" in why and "algorithm.dynamic_sampling=false" in why


def test_closed_admission_with_nothing_running_stops_the_wait_after_stall_s_and_only_then():
    s = BufferState(batch_size=2, max_staleness=0, limits=_limits(2, stall_s=30.0))
    s.feed(tasks(8))
    for t in s.lease(0, 2):
        finish(s, 0, t)
    s.take_batch(2)  # step 1's batch; no sync yet: version 0 admits (0 + 0 + 1) x 2 = 2 groups, both taken
    assert s.lease(0, 2) == [] and s.no_progress(2, now=100.0) is None  # the stall starts now
    assert s.no_progress(2, now=129.0) is None
    why = s.no_progress(2, now=130.0)
    assert "admission is closed at version 0" in why and "rollout.max_staleness >= K - 1" in why, why
    s.staleness.set_version(2)  # a sync: admission opens, nothing is stalled any more
    assert s.no_progress(2, now=131.0) is None and len(s.lease(0, 4)) == 4


def test_a_stall_that_ended_with_a_batch_does_not_count_against_the_next_wait():
    s = BufferState(batch_size=1, max_staleness=0, limits=_limits(1, stall_s=10.0))
    assert s.no_progress(1, now=0.0) is None  # no prompts, nothing running: a stall starts
    s.feed(tasks(1))
    finish(s, 0, s.lease(0, 1)[0])
    s.take_batch(1)
    s.staleness.set_version(1)
    assert s.no_progress(1, now=50.0) is None  # a new stall, not one 50 s old
    assert "no prompts are queued" in s.no_progress(1, now=60.0)


def test_only_the_life_holding_a_lease_hands_its_group_over():
    """The fence: a worker declared dead whose process lives on, or an earlier life of a restarted one, no longer
    holds its prompts once they are requeued; what it hands over is late, counted, and touches nothing else."""
    s = BufferState(batch_size=2, max_staleness=0)
    s.feed(tasks(2))
    a, b = s.lease(0, 2, life=0)
    assert s.holds(0, a.id, 0) and not s.holds(0, a.id, 1) and not s.holds(1, a.id, 0)
    assert s.requeue(0) == 2  # declared dead: its prompts go back, a new life begins
    assert not s.holds(0, a.id, 0)
    assert "without holding its lease" in s.late(0, a.id)  # the old process hands a group over anyway
    assert [t.id for t in s.lease(0, 2, life=1)] == [a.id, b.id]  # the restarted worker takes them again
    assert not s.holds(0, a.id, 0) and s.holds(0, a.id, 1)  # the old life still holds nothing
    assert s.requeue(0, [a.id], life=0) == 0  # the old life's failed call gives back nothing of the new one's
    finish(s, 0, a)
    assert s.ledger.late == 1 and s.ledger.produced == 1 and s.staleness.running == 1
    assert s.ledger.balanced(waiting=len(s.items))
