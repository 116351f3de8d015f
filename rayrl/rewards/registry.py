"""Resolve a reward function from its import string and normalise what it returns."""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable

import msgspec

from rayrl.imports import load_object
from rayrl.types import Sample, Task


class RewardResult(msgspec.Struct, frozen=True):
    reward: float
    reason: str = ""


RewardFn = Callable[[Sample, Task], "float | RewardResult"]


def load_reward_fn(spec: str, search_path: list[str] | None = None) -> RewardFn:
    """'pkg.mod:fn' -> the function; a clear error names what could not be found. search_path: directories
    to import from besides sys.path (the driver's working directory, for reward actors on its node)."""
    fn = load_object(spec, "reward.fn", search_path, "function")
    if not callable(fn):
        raise ValueError(f"reward.fn '{spec}': '{spec.split(':', 1)[1]}' is not a function")
    return fn


class RewardRejected(ValueError):
    """What a reward function returned is not a usable reward; reason is the counted failure kind."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def as_result(value: "float | RewardResult") -> RewardResult:
    """Any real number (Python, numpy, a 0-d array or tensor) or a RewardResult -> a finite RewardResult;
    anything else raises RewardRejected("wrong_type" | "non_finite", message)."""
    result = value if isinstance(value, RewardResult) else RewardResult(_real(value))
    if not math.isfinite(result.reward):
        raise RewardRejected("non_finite", f"the reward function returned {result.reward}")
    return result


def _real(value) -> float:
    if getattr(value, "ndim", None) == 0 and hasattr(value, "item"):  # a 0-d numpy array or torch tensor
        value = value.item()
    if isinstance(value, numbers.Real):  # int, float, bool, numpy scalars
        return float(value)
    raise RewardRejected("wrong_type", f"a reward function must return a real number or RewardResult, "
                                       f"got {type(value).__module__}.{type(value).__qualname__}")
