"""Exact-match reward for arithmetic: the completion must be the answer's integer (as many times as the answer
writes it, data.answer_copies) followed by EOS."""

from __future__ import annotations

import re

from rayrl.rewards.registry import RewardResult
from rayrl.types import Sample, Task

_INTEGER = re.compile(r"-?\d+")


def exact_match(sample: Sample, task: Task) -> RewardResult:
    """1.0 for the right integer, every copy of it, with a clean stop; 0.0 with a reason otherwise."""
    if sample.finish_reason != "stop":
        return RewardResult(0.0, f"no end of answer ({sample.finish_reason})")
    words = sample.text.split()
    if not words or not all(_INTEGER.fullmatch(w) for w in words):
        return RewardResult(0.0, "format: not an integer")
    if [int(w) for w in words] != [int(w) for w in task.answer.split()]:
        return RewardResult(0.0, "wrong answer")
    return RewardResult(1.0, "correct")
