"""The rule's reward and a reward model's score as one training reward (reward.model.combine). A sample the
model was asked about and could not score gets a model failure status: its group is never trained on."""

from __future__ import annotations

from rayrl.config import RewardModelConfig
from rayrl.rewards.teacher_scores import TEACHER_FAILURES
from rayrl.types import ModelScore, Sample, ScoreRequest, TrajectoryGroup

MODEL_FAILURES = ("unparsable", "model_timeout", "model_error")  # a sample's reward_status: no score to train on
UNDECIDED = "undecided"  # the rule returned None: under combine=fallback the model decides


def needs_model(sample: Sample, section: RewardModelConfig) -> bool:
    return section.combine != "fallback" or sample.reward_status == UNDECIDED


def requests_for(groups: list[TrajectoryGroup], section: RewardModelConfig) -> list[ScoreRequest]:
    """What the model is asked, in group and sample order, for the samples that need it."""
    return [ScoreRequest(g.task.prompt, s.text.strip(), g.task.answer)
            for g in groups for s in g.samples if needs_model(s, section)]


def unscored(group: TrajectoryGroup) -> str | None:
    """Why the group cannot be trained on (samples the reward model or the teacher left without a score), or None."""
    missing = [s for s in group.samples if s.reward_status in MODEL_FAILURES + TEACHER_FAILURES]
    if not missing:
        return None
    who = "teacher" if missing[0].reward_status in TEACHER_FAILURES else "reward model"
    return f"{len(missing)} samples without a {who} score; first: {missing[0].reward_reason}"


def failed(failure: str, message: str, n: int) -> list[ModelScore]:
    """n samples left unscored by one failure (model_timeout, model_error): the reason reads "failure: message"."""
    return [ModelScore(None, f"{failure}: {message}", failure)] * n


def apply(groups: list[TrajectoryGroup], scores: list[ModelScore], section: RewardModelConfig) -> None:
    """Each sample that needed the model takes its score into its reward; scores are in requests_for's order."""
    it = iter(scores)
    for g in groups:
        for s in g.samples:
            if needs_model(s, section):
                _combine(s, next(it), section)


def _combine(sample: Sample, judged: ModelScore, section: RewardModelConfig) -> None:
    undecided = sample.reward_status == UNDECIDED
    sample.rule_reward = None if undecided else sample.reward
    if judged.score is None:
        sample.reward, sample.reward_reason = 0.0, judged.reason
        sample.reward_status = judged.failure if judged.failure in MODEL_FAILURES else "model_error"
        return
    sample.model_score = judged.score
    weighted = section.weight * judged.score
    if section.combine == "sum":
        sample.reward = sample.reward + weighted
    else:  # only, or fallback on an undecided sample
        sample.reward = weighted
        if undecided:
            sample.reward_status, sample.reward_reason = "ok", f"judged {judged.score:.3f} (the rule could not decide)"


AGREE_AT = {"judge": 0.5, "scorer": 0.0}  # a score at or above this says "right"


def measured_reward(sample: Sample) -> float:
    """What held-out accuracy counts: the rule's reward when a reward model set the training reward."""
    return sample.rule_reward if sample.rule_reward is not None else sample.reward


def agreement(samples: list[Sample], kind: str) -> float | None:
    """The share of samples scored by both where the model's verdict (score ≥ AGREE_AT) is the rule's (≥ 1)."""
    both = [s for s in samples if s.rule_reward is not None and s.model_score is not None]
    if not both:
        return None
    return sum((s.rule_reward >= 1.0) == (s.model_score >= AGREE_AT[kind]) for s in both) / len(both)
