"""Resolve a reward function from its import string and normalise what it returns."""

from __future__ import annotations

import importlib
from collections.abc import Callable

import msgspec

from rayrl.types import Sample, Task


class RewardResult(msgspec.Struct, frozen=True):
    reward: float
    reason: str = ""


RewardFn = Callable[[Sample, Task], "float | RewardResult"]


def load_reward_fn(spec: str) -> RewardFn:
    """'pkg.mod:fn' -> the function; a clear error names what could not be found."""
    if ":" not in spec:
        raise ValueError(f"reward.fn '{spec}' must look like 'package.module:function'")
    mod_name, attr = spec.split(":", 1)
    try:
        module = importlib.import_module(mod_name)
    except ImportError as err:
        raise ValueError(f"reward.fn '{spec}': cannot import module '{mod_name}' ({err})") from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ValueError(f"reward.fn '{spec}': module '{mod_name}' has no function '{attr}'")
    return fn


def as_result(value: "float | RewardResult") -> RewardResult:
    if isinstance(value, RewardResult):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return RewardResult(float(value))
    raise TypeError(f"a reward function must return a float or RewardResult, got {type(value).__name__}")
