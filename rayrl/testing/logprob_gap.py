"""How far a learner's log-probs of sampled tokens are from the engine's that sampled them: the gauges the
GPU checks and benchmarks report (as the run's MismatchMeter)."""

from __future__ import annotations

import math


def mismatch(learner: list[list[float]], engine: list[list[float]]) -> dict:
    """The field's gauges of learner vs engine log-probs of the same tokens (as MismatchMeter)."""
    deltas = [a - b for ra, rb in zip(learner, engine) for a, b in zip(ra, rb)]
    n = len(deltas)
    return {"mismatch_tokens": n, "mismatch_abs_mean": sum(map(abs, deltas)) / n,
            "token_mult_prob_error": sum(math.exp(abs(d)) for d in deltas) / n,
            "mismatch_k3": sum(math.exp(-d) + d - 1 for d in deltas) / n, "mismatch_max": max(map(abs, deltas))}
