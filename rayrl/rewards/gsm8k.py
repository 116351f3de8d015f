"""GSM8K answer check: the completion's final number must equal the reference answer."""

from __future__ import annotations

import re

from rayrl.data.gsm8k import FINAL_ANSWER
from rayrl.rewards.registry import RewardResult
from rayrl.types import Sample, Task

_NUMBER = re.compile(r"-?[\d,]*\.?\d+")


def parse_answer(text: str) -> str | None:
    """The number after '####' if present, else the last number in the text; commas removed."""
    marked = FINAL_ANSWER.findall(text)
    found = marked or _NUMBER.findall(text)
    return found[-1].replace(",", "").rstrip(".") if found else None


def answer_match(sample: Sample, task: Task) -> RewardResult:
    """1.0 when the parsed answer equals the reference numerically; 0.0 with a reason otherwise."""
    got = parse_answer(sample.text)
    if got is None:
        return RewardResult(0.0, f"no number in the answer ({sample.finish_reason})")
    try:
        same = abs(float(got) - float(task.answer)) < 1e-6
    except ValueError:
        return RewardResult(0.0, f"unparseable number {got!r}")
    return RewardResult(1.0, "correct") if same else RewardResult(0.0, "wrong answer")
