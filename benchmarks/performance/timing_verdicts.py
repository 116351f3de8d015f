"""A verdict parser for timing a judge whose weights are random (benchmarks/run_gpu_checks.sh judge): every
verdict parses, to its length over the token budget, so the run trains and the judge's engine time is what is
measured, not its opinions."""

from __future__ import annotations


def verdict_length(verdict) -> float:
    return min(1.0, len(verdict.completion_ids) / 8)
