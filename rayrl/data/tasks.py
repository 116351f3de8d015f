"""data.task -> (train, held-out) task lists."""

from __future__ import annotations

from rayrl.config import DataConfig
from rayrl.types import Task


def load_tasks(cfg: DataConfig) -> tuple[list[Task], list[Task]]:
    if cfg.task == "arithmetic":
        from rayrl.data.arithmetic import split

        return split(cfg)
    if cfg.task == "visual_arithmetic":
        from rayrl.data.visual_arithmetic import split_visual

        return split_visual(cfg.min_operand, cfg.max_operand, cfg.eval_size, cfg.seed)
    if cfg.task == "word_problems":
        from rayrl.data.word_problems import split_word_problems

        return split_word_problems(cfg)
    from rayrl.data.gsm8k import split_gsm8k

    return split_gsm8k(cfg)
