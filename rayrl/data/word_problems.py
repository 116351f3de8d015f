"""Arithmetic word problems for a calculator-tool agent: the verb decides the operation (+, -, *),
the numbers are in the text; disjoint train and held-out splits by seed."""

from __future__ import annotations

import random

from rayrl.config import DataConfig
from rayrl.types import Task
from rayrl.calculator import evaluate_arithmetic

NAMES = ["Ann", "Bob", "Cy", "Dee", "Eve", "Fay", "Gus", "Hal"]
THINGS = ["pens", "cups", "eggs", "toys", "hats", "keys"]
KINDS = {  # operation -> problem text
    "+": "{name} has {a} {thing} and gets {b} more. How many {thing}?",
    "-": "{name} has {a} {thing} and gives away {b}. How many {thing} are left?",
    "*": "{name} buys {a} boxes of {b} {thing}. How many {thing}?",
}


def all_word_problems(cfg: DataConfig) -> list[Task]:
    """Every (kind, a, b) with data.min_operand <= b < a <= data.max_operand (the same pairs for each kind,
    so no difference goes below 0 and each kind is a third of the tasks), one name and thing each."""
    rng = random.Random(cfg.seed)
    tasks = []
    for op, text in KINDS.items():
        for a in range(cfg.min_operand, cfg.max_operand + 1):
            for b in range(cfg.min_operand, cfg.max_operand + 1):
                if b >= a:
                    continue
                prompt = text.format(name=rng.choice(NAMES), thing=rng.choice(THINGS), a=a, b=b)
                answer = {"+": a + b, "-": a - b, "*": a * b}[op]
                tasks.append(Task(id=f"w{op}{a}.{b}", prompt=prompt, answer=str(answer)))
    return tasks


def split_word_problems(cfg: DataConfig) -> tuple[list[Task], list[Task]]:
    """(train, held_out): a seeded shuffle, the first eval_size problems held out."""
    tasks = all_word_problems(cfg)
    if cfg.eval_size >= len(tasks):
        raise ValueError(f"data.eval_size={cfg.eval_size} leaves no training problems out of {len(tasks)}; "
                         "lower data.eval_size or widen data.min_operand..data.max_operand")
    random.Random(cfg.seed).shuffle(tasks)
    return tasks[cfg.eval_size:], tasks[: cfg.eval_size]


def operation(task: Task) -> str:
    return task.id[1]


def warmup_conversations(tasks: list[Task], seed: int, misread: str = "-", as_op: str = "+",
                         p_misread: float = 0.6) -> list[list[dict]]:
    """A transcript per task: a calculator call, its result, the result as the answer. Problems of the
    misread kind call as_op instead with probability p_misread: the warm-up teaches the tool-call format
    and leaves a habit (greedy decoding takes the wrong operation) that RL must unlearn."""
    rng = random.Random(seed)
    out = []
    for t in tasks:
        a, b = t.id[2:].split("@")[0].split(".")
        op = as_op if operation(t) == misread and rng.random() < p_misread else operation(t)
        expression = f"{a}{op}{b}"
        result = evaluate_arithmetic(expression)
        call = {"id": "call_0", "type": "function", "function": {"name": "calculator", "arguments": {"expression": expression}}}
        out.append([{"role": "user", "content": t.prompt}, {"role": "assistant", "content": "", "tool_calls": [call]},
                    {"role": "tool", "tool_call_id": "call_0", "content": result}, {"role": "assistant", "content": result}])
    return out
