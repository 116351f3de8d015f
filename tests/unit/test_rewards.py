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
    assert statuses == [(1.0, "ok"), (0.0, "error"), (0.0, "timeout"), (0.0, "error")]
    assert "checker crashed" in scored.samples[1].reward_reason
    assert "must return a float" in scored.samples[3].reward_reason
    assert dict(scorer.counts) == {"ok": 1, "error": 2, "timeout": 1}
