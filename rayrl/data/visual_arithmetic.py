"""Visual arithmetic: the sum is drawn in a small picture and the prompt holds only the picture, so the policy
must read the image to answer. Train and held-out splits are disjoint by operand pair."""

from __future__ import annotations

import io
import itertools
import random

from PIL import Image, ImageDraw

from rayrl.models.vision import PLACEHOLDER
from rayrl.types import Task

IMAGE_SIZE = (56, 28)  # width, height: 4 x 2 patches of 14 pixels, 2 image tokens after Qwen2-VL's 2 x 2 merge


def render(a: int, b: int, size: tuple[int, int] = IMAGE_SIZE) -> bytes:
    """'a+b' in black on white, Pillow's built-in font, as PNG bytes (deterministic)."""
    picture = Image.new("RGB", size, "white")
    ImageDraw.Draw(picture).text((2, size[1] // 2 - 6), f"{a}+{b}", fill="black")
    out = io.BytesIO()
    picture.save(out, format="PNG")
    return out.getvalue()


def visual_problems(min_operand: int, max_operand: int) -> list[Task]:
    """Every a+b in the range, the picture in place of the text."""
    rng = range(min_operand, max_operand + 1)
    return [Task(id=f"img:{a}+{b}", prompt=f"{PLACEHOLDER}=", answer=str(a + b), images=(render(a, b),))
            for a, b in itertools.product(rng, rng)]


def split_visual(min_operand: int, max_operand: int, eval_size: int, seed: int) -> tuple[list[Task], list[Task]]:
    """(train, held_out): a seeded shuffle, the first eval_size problems held out."""
    tasks = visual_problems(min_operand, max_operand)
    if eval_size >= len(tasks):
        raise ValueError(f"data.eval_size={eval_size} leaves no training problems out of {len(tasks)}; "
                         "lower data.eval_size or widen data.min_operand..data.max_operand")
    random.Random(seed).shuffle(tasks)
    return tasks[eval_size:], tasks[:eval_size]
