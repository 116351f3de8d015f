"""The teacher's log-probs on the samples (teacher.enabled): what it is asked, and its answers placed on each sample.
A sample whose scores did not come (timeout, a dead actor, an engine error) or came with the wrong length or a
non-finite value gets a teacher failure status: its group is never trained on, and is generated again."""

from __future__ import annotations

import math

from rayrl.types import TokenScoreRequest, TrajectoryGroup

TEACHER_FAILURES = ("teacher_timeout", "teacher_error")  # a sample's reward_status: no teacher scores to train on


def requests_for(groups: list[TrajectoryGroup]) -> list[TokenScoreRequest]:
    """Every sample's tokens, in group and sample order."""
    return [TokenScoreRequest(list(s.prompt_ids), list(s.completion_ids)) for g in groups for s in g.samples]


def apply(groups: list[TrajectoryGroup], scores: list[list[float]]) -> None:
    """Each sample takes its log-probs, in requests_for's order; one that does not fit its tokens fails."""
    samples = [s for g in groups for s in g.samples]
    if len(scores) != len(samples):
        return failed(groups, "teacher_error", f"the teacher answered {len(scores)} requests of {len(samples)}")
    for s, lp in zip(samples, scores):
        if len(lp) != len(s.completion_ids):
            _fail(s, "teacher_error", f"the teacher returned {len(lp)} log-probs for {len(s.completion_ids)} tokens")
        elif not all(math.isfinite(x) for x in lp):
            _fail(s, "teacher_error", "the teacher returned a non-finite log-prob")
        else:
            s.teacher_logprobs = list(lp)


def failed(groups: list[TrajectoryGroup], failure: str, message: str) -> None:
    """Every sample of the groups left without teacher scores by one failure."""
    for g in groups:
        for s in g.samples:
            _fail(s, failure, message)


def _fail(sample, failure: str, message: str) -> None:
    sample.teacher_logprobs = None
    sample.reward_status, sample.reward_reason = failure, f"{failure}: {message}"
