"""Reward functions that fail the ways users' do, for tests/cpu/test_reward_failures.py (imported by the
reward actors by name from the working directory: `tests.cpu.faulty_rewards:<fn>`)."""

from __future__ import annotations

import itertools
import time

import numpy as np

from rayrl.rewards.arithmetic import exact_match

_calls = itertools.count()  # per reward actor process


def _odd(sample) -> bool:
    return hash((sample.request_id, sample.text, len(sample.completion_ids))) % 2 == 1


def fails_sometimes(sample, task):
    """Half the samples fail, in three ways by the sample: it raises, returns NaN or inf, or returns a string."""
    if not _odd(sample):
        return exact_match(sample, task)
    kind = hash(("kind", sample.request_id, sample.text)) % 3
    if kind == 0:
        raise RuntimeError("checker crashed on this sample")
    return (float("nan"), "1.0")[kind - 1]


def numpy_scalar(sample, task):
    return np.float32(exact_match(sample, task).reward)


def always_raises(sample, task):
    raise ValueError("no grader configured")


def hangs_always(sample, task):
    time.sleep(3600)


def hangs_first_calls(sample, task):
    if next(_calls) < 4:  # the first four calls hang (their threads are abandoned), the rest answer
        time.sleep(3600)
    return exact_match(sample, task)


def returns_string(sample, task):
    return "1.0"


def returns_none(sample, task):
    return None
