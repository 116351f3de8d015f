"""Synthetic arithmetic: problems from config, disjoint train and held-out splits by seed."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator

from rayrl.config import DataConfig
from rayrl.types import Task

_APPLY = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}


def all_problems(cfg: DataConfig) -> list[Task]:
    """Every (a, op, b) in the configured ranges, in a fixed order; the answer is the result written
    data.answer_copies times (more than once: long answers, so that generation is most of a step)."""
    rng = range(cfg.min_operand, cfg.max_operand + 1)
    return [
        Task(id=f"{a}{op}{b}", prompt=f"{a}{op}{b}=", answer=" ".join([str(_APPLY[op](a, b))] * cfg.answer_copies))
        for op in cfg.ops for a, b in itertools.product(rng, rng)
    ]


def split(cfg: DataConfig) -> tuple[list[Task], list[Task]]:
    """(train, held_out): a seeded shuffle, the first eval_size problems held out."""
    tasks = all_problems(cfg)
    if cfg.eval_size >= len(tasks):
        raise ValueError(
            f"data.eval_size={cfg.eval_size} leaves no training problems out of {len(tasks)}; "
            "lower data.eval_size or widen data.min_operand..data.max_operand"
        )
    random.Random(cfg.seed).shuffle(tasks)
    return tasks[cfg.eval_size:], tasks[: cfg.eval_size]


def endless(tasks: list[Task], seed: int) -> Iterator[Task]:
    """Epoch after epoch of the tasks, reshuffled each epoch."""
    rng = random.Random(seed)
    order = list(tasks)
    while True:
        rng.shuffle(order)
        yield from order
