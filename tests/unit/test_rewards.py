import time

import pytest

from rayrl.rewards import RewardResult, load_reward_fn
from rayrl.rewards.arithmetic import exact_match
from rayrl.rewards.scoring import GroupScorer
from rayrl.types import Sample, Task, TrajectoryGroup

TASK = Task(id="2+3", prompt="2+3=", answer="5")


def sample(text: str, finish: str = "stop") -> Sample:
    return Sample("r", [1], [5], [-0.1], [0], finish, text=text)


@pytest.mark.parametrize("text, finish, reward, reason", [
    ("5", "stop", 1.0, "correct"), (" 5", "stop", 1.0, "correct"), ("6", "stop", 0.0, "wrong answer"),
    ("5+", "stop", 0.0, "format"), ("", "stop", 0.0, "format"), ("5", "length", 0.0, "no end"),
])
def test_exact_match(text, finish, reward, reason):
    result = exact_match(sample(text, finish), TASK)
    assert result.reward == reward and reason in result.reason


def test_load_reward_fn_errors():
    assert load_reward_fn("rayrl.rewards.arithmetic:exact_match") is exact_match
    with pytest.raises(ValueError, match="package.module:function"):
        load_reward_fn("exact_match")
    with pytest.raises(ValueError, match="cannot import"):
        load_reward_fn("no_such_module_xyz:f")
    with pytest.raises(ValueError, match="has no function 'nope'"):
        load_reward_fn("rayrl.rewards.arithmetic:nope")


def flaky(s: Sample, task: Task):
    if s.text == "boom":
        raise RuntimeError("checker crashed")
    if s.text == "slow":
        time.sleep(2.0)
    if s.text == "bad":
        return "not a number"
    return RewardResult(1.0, "fine")


def test_scorer_turns_failures_into_counted_zeros():
    scorer = GroupScorer(flaky, timeout_s=0.2, max_threads=4)
    group = TrajectoryGroup(TASK, [sample("ok"), sample("boom"), sample("slow"), sample("bad")])
    scored = scorer.score(group)
    statuses = [(s.reward, s.reward_status) for s in scored.samples]
    assert statuses == [(1.0, "ok"), (0.0, "error"), (0.0, "timeout"), (0.0, "wrong_type")]
    assert "checker crashed" in scored.samples[1].reward_reason
    assert "must return a real number" in scored.samples[3].reward_reason and "str" in scored.samples[3].reward_reason
    stats = scorer.stats()
    assert stats["counts"] == {"ok": 1, "error": 1, "timeout": 1, "non_finite": 0, "wrong_type": 1, "unparsable": 0,
                               "model_timeout": 0, "model_error": 0, "teacher_timeout": 0, "teacher_error": 0}
    assert stats["window_failed"] == 3 and stats["window"] == 4 and stats["examples"]["timeout"]


def test_every_real_number_type_is_a_reward_and_non_finite_is_a_failure():
    import numpy as np
    import torch

    values = [1, 0.5, True, np.float32(0.25), np.int64(2), np.array(0.75), torch.tensor(0.5), float("nan"),
              float("inf"), -float("inf"), np.float64("nan"), [1.0], None]
    scorer = GroupScorer(lambda s, t: values[int(s.text)], timeout_s=5.0, max_threads=2)
    scored = scorer.score(TrajectoryGroup(TASK, [sample(str(i)) for i in range(len(values))]))
    got = [(s.reward, s.reward_status) for s in scored.samples]
    assert got[:7] == [(1.0, "ok"), (0.5, "ok"), (1.0, "ok"), (0.25, "ok"), (2.0, "ok"), (0.75, "ok"), (0.5, "ok")]
    assert [st for _, st in got[7:11]] == ["non_finite"] * 4 and all(r == 0.0 for r, _ in got[7:])
    assert [st for _, st in got[11:]] == ["wrong_type"] * 2 and "NoneType" in scored.samples[12].reward_reason


def test_a_reward_that_hangs_on_its_first_calls_does_not_starve_later_ones():
    import threading

    release, calls = threading.Event(), []

    def hangs_first(s, t):
        calls.append(s.text)
        if len(calls) <= 4:
            release.wait()  # hangs until the test ends: these threads are abandoned, never killed
        return 1.0

    scorer = GroupScorer(hangs_first, timeout_s=0.3, max_threads=4)
    try:
        first = scorer.score(TrajectoryGroup(TASK, [sample(str(i)) for i in range(4)]))
        assert [s.reward_status for s in first.samples] == ["timeout"] * 4
        again = scorer.score(TrajectoryGroup(TASK, [sample(str(i)) for i in range(8)]))  # all four slots were hung
        assert [s.reward_status for s in again.samples] == ["ok"] * 8
        assert scorer.stats()["abandoned"] == 4
    finally:
        release.set()


def test_a_reward_that_always_hangs_times_out_every_call_from_its_own_start():
    import threading

    never = threading.Event()
    scorer = GroupScorer(lambda s, t: never.wait(), timeout_s=0.2, max_threads=2)
    try:
        for _ in range(3):
            scored = scorer.score(TrajectoryGroup(TASK, [sample("x") for _ in range(4)]))
            assert [s.reward_status for s in scored.samples] == ["timeout"] * 4
        assert scorer.stats()["abandoned"] == 12  # 12 calls through 2 slots: every one abandoned, none starved
    finally:
        never.set()


def test_reward_calls_reuse_their_threads():
    import threading

    used = set()

    def record(s, t):
        used.add(threading.get_ident())
        return 1.0

    scorer = GroupScorer(record, timeout_s=5.0, max_threads=4)
    for _ in range(10):
        scored = scorer.score(TrajectoryGroup(TASK, [sample(str(i)) for i in range(8)]))
        assert [s.reward_status for s in scored.samples] == ["ok"] * 8
    assert 1 <= len(used) <= 4  # 80 calls, at most max_threads at once, on threads started once


def test_long_answers_are_the_sum_written_answer_copies_times():
    from rayrl.config import DataConfig
    from rayrl.data.arithmetic import all_problems

    task = next(t for t in all_problems(DataConfig(answer_copies=3, max_operand=9)) if t.id == "2+3")
    assert task.answer == "5 5 5"
    assert exact_match(sample("5 5 5"), task).reward == 1.0
    assert exact_match(sample("5 5"), task).reason == "wrong answer"  # too few copies
    assert exact_match(sample("5 5 6"), task).reason == "wrong answer"
    assert exact_match(sample("5 5 x"), task).reason.startswith("format")
    assert exact_match(sample("5 5 5", "length"), task).reward == 0.0  # no clean stop
