"""Helpers the benchmarks share: spreads and ratios over repeats, merging result files, plots, one table printer.
The record beside each result (machine, commit, date) is rayrl.testing.records's."""

from __future__ import annotations

import math
import statistics

from rayrl.testing.records import (RESULTS, benchmark_parser, format_table, outside_ray_env, run_outside_ray,  # noqa: F401
                                   write_result)


def spread(values: list[float]) -> dict | None:
    """Median, min and max of repeated measurements (None for none)."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values)} if values else None


def bootstrap_ratio(mine: list[float], theirs: list[float], draws: int = 10000, seed: int = 0) -> dict | None:
    """median(mine) / median(theirs) and its bootstrap 90 % interval (each side's runs resampled with replacement);
    inf stands for a run that never got there."""
    import random

    if not mine or not theirs:
        return None
    rng = random.Random(seed)

    def ratio(a: list[float], b: list[float]) -> float:
        top, bottom = statistics.median(a), statistics.median(b)
        return math.inf if math.isinf(top) else top / bottom  # neither side there counts against mine
    boot = sorted(ratio(rng.choices(mine, k=len(mine)), rng.choices(theirs, k=len(theirs))) for _ in range(draws))
    return {"ratio": ratio(mine, theirs), "low": boot[int(0.05 * draws)], "high": boot[int(0.95 * draws) - 1]}


def as_repeats(parts: list[dict]) -> tuple[list[dict], int]:
    """The runs of several result files renumbered as consecutive repeats of one result, and how many repeats."""
    runs, offset = [], 0
    for p in parts:
        runs += [{**r, "repeat": r["repeat"] + offset} for r in p["runs"]]
        offset += 1 + max(r["repeat"] for r in p["runs"])
    return runs, offset


def merged_commit(parts: list[dict]) -> str:
    """The commits that measured merged result files, each once in order: "9a2dc5c,2637b8c"."""
    return ",".join(dict.fromkeys(p["commit"] for p in parts))


def pyplot():
    """matplotlib's pyplot on a file backend, or None where the bench extra is missing (a GPU host: --merge the
    JSON where it is installed)."""
    try:
        import matplotlib
    except ImportError:
        print("matplotlib missing: no PNG (pip install rayrl[bench])")
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def window_parser(doc: str | None, steps: int = 8, warmup: int = 3, tokens: int = 128):
    """benchmark_parser with the one-GPU comparisons' window: --repeats, --steps, --warmup (steps left out of
    every figure) and --tokens (completion tokens per sample)."""
    p = benchmark_parser(doc)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--steps", type=int, default=steps)
    p.add_argument("--warmup", type=int, default=warmup)
    p.add_argument("--tokens", type=int, default=tokens, help="completion tokens per sample")
    return p


def print_table(rows: list[dict], columns: list[str]) -> None:
    print(format_table(rows, columns))


def prompt_dataset(rows: list[dict], fingerprint: str):
    """TRL's prompts as a datasets.Dataset with a fingerprint given: otherwise datasets hashes its own state with
    dill, which raised PicklingError ("Can't pickle <class 'MonthDayNano'>") with the GPU machine's pyarrow."""
    import pyarrow as pa
    from datasets import Dataset

    return Dataset(pa.Table.from_pylist(rows), fingerprint=fingerprint)
