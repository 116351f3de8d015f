"""Reward models without Ray: the verdict parsers, the demo judge on the hf engine (one engine call for many
samples and votes; unparsable verdicts named), the demo scorer, and how scores combine with the rule."""

from __future__ import annotations

import asyncio
import math

import pytest

from rayrl import components
from rayrl.data.arithmetic import split
from rayrl.demo import prepare_models
from rayrl.demo.judge import verdict_examples
from rayrl.rewards import combine
from rayrl.rewards.scoring import GroupScorer
from rayrl.rewards.verdicts import number_in_text, yes_or_no, yes_probability
from rayrl.types import ModelScore, Sample, Task, TrajectoryGroup

TEMPLATE = "reward.model.template='{answer} vs {reference}?'"


def _verdict(text: str, p: float = 1.0) -> Sample:
    return Sample("judge-0", [1], [5], [math.log(p)], [0], "length", text=text)


def test_verdict_parsers():
    assert yes_probability(_verdict("y", 0.9)) == pytest.approx(0.9)
    assert yes_probability(_verdict(" No", 0.8)) == pytest.approx(0.2)
    assert number_in_text(_verdict("Score: 7/10")) == pytest.approx(0.7)
    assert yes_or_no(_verdict("yes", 0.6)) == 1.0 and yes_or_no(_verdict("n", 0.6)) == 0.0
    for parse, text in ((yes_probability, "maybe"), (yes_probability, ""), (number_in_text, "great"), (yes_or_no, "?")):
        with pytest.raises(ValueError):
            parse(_verdict(text))


@pytest.fixture(scope="module")
def judge_cfg(make_cfg):
    return make_cfg("reward.model.kind=judge", TEMPLATE, "demo.judge_warmup_steps=1000")


def test_the_demo_judge_tells_right_from_wrong_in_one_engine_call(judge_cfg):
    judge = components.reward_model(judge_cfg, prepare_models(judge_cfg).reward_model)
    examples = verdict_examples(split(judge_cfg.data)[1], seed=1)[:64]  # held-out problems
    scores = asyncio.run(judge.score([r for r, _ in examples]))
    assert judge.engine_calls == 1 and all(s.score is not None and 0 <= s.score <= 1 for s in scores)
    right = sum((s.score >= 0.5) == ok for s, (_, ok) in zip(scores, examples)) / len(examples)
    assert right >= 0.8, right


def test_votes_are_averaged_and_unparsable_verdicts_named(judge_cfg):
    cfg = judge_cfg.model_copy(update={"reward": judge_cfg.reward.model_copy(update={"model": judge_cfg.reward.model
                               .model_copy(update={"votes": 4, "temperature": 1.0, "max_new_tokens": 2})})})
    judge = components.reward_model(cfg, prepare_models(judge_cfg).reward_model)
    request = verdict_examples(split(cfg.data)[1], seed=1)[0][0]
    [score] = asyncio.run(judge.score([request]))
    assert score.score is not None and 0 <= score.score <= 1
    judge.parse = lambda verdict: number_in_text(verdict)  # "y" / "n" hold no number
    [score] = asyncio.run(judge.score([request]))
    assert score.score is None and score.failure == "unparsable"
    assert score.reason.startswith("unparsable: verdict") and "holds no number" in score.reason


def test_the_demo_scorer_scores_right_answers_higher(make_cfg):
    cfg = make_cfg("reward.model.kind=scorer", TEMPLATE, "demo.judge_warmup_steps=300")
    scorer = components.reward_model(cfg, prepare_models(cfg).reward_model)
    examples = verdict_examples(split(cfg.data)[1], seed=1)[:64]
    scores = asyncio.run(scorer.score([r for r, _ in examples]))
    assert scorer.engine_calls == 1
    right = [s.score for s, (_, ok) in zip(scores, examples) if ok]
    wrong = [s.score for s, (_, ok) in zip(scores, examples) if not ok]
    assert sum(right) / len(right) > sum(wrong) / len(wrong)


def _group(rewards: list[float | None]) -> TrajectoryGroup:
    samples = [Sample(f"r{i}", [1], [5], [0.0], [0], "stop", text=str(i)) for i in range(len(rewards))]
    group = TrajectoryGroup(Task("t", "1+1=", "2"), samples)
    scorer = GroupScorer(lambda s, t: rewards[int(s.text)], timeout_s=5.0, max_threads=2, undecided_ok=True)
    return scorer.score(group)


@pytest.mark.parametrize("how, expected", [("only", [0.5, 0.5, 0.0]), ("sum", [1.5, 0.5, 0.0]),
                                           ("fallback", [1.0, 0.5, 0.0])])
def test_scores_combine_with_the_rule(make_cfg, how, expected):
    section = make_cfg("reward.model.kind=judge", f"reward.model.combine={how}", "reward.model.weight=0.5").reward.model
    group = _group([1.0, None, 0.0] if how == "fallback" else [1.0, 0.0, 0.0])
    asked = combine.requests_for([group], section)
    assert len(asked) == (1 if how == "fallback" else 3) and asked[0].reference == "2"
    scores = [ModelScore(1.0)] if how == "fallback" else \
        [ModelScore(1.0), ModelScore(1.0), ModelScore(None, "unparsable: x", "unparsable")]
    combine.apply([group], scores, section)
    s = group.samples
    if how == "fallback":  # the rule decided two; the model the third, in its place
        assert [x.reward for x in s] == [1.0, 0.5, 0.0] and s[1].reward_status == "ok" and s[1].rule_reward is None
        return
    assert [x.reward for x in s] == expected
    assert [x.reward_status for x in s] == ["ok", "ok", "unparsable"] and s[2].reward_reason == "unparsable: x"
    assert [x.rule_reward for x in s] == [1.0, 0.0, 0.0] and combine.measured_reward(s[0]) == 1.0
    assert combine.agreement(s, "judge") == 0.5  # sample 0 (right, 1.0) agrees; sample 1 (wrong, 1.0) does not
