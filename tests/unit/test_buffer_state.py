"""The buffer's bookkeeping without Ray: leases by staleness, a dead worker's prompts back in front, stale
groups regenerated, dynamic sampling's drops, and a ledger that balances through all of it."""

from rayrl.buffer import BufferState, Ledger
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
