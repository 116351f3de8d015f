"""A task's images as PNG bytes: what a task may carry (a path, encoded bytes or an array) checked and
normalised once, so every later hop (object store, engines, reward, learner) sees one form."""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np
from PIL import Image, UnidentifiedImageError

from rayrl.models.vision import PLACEHOLDER


class BadImages(ValueError):
    """A task's images that cannot be used: the rollout rejects the task (counted) rather than stop the run."""


def check_task_images(prompt: str, images: tuple[bytes, ...], task_id: str) -> None:
    """What the rollout checks before sampling a task with images: one placeholder per image, each decodes."""
    if (n := prompt.count(PLACEHOLDER)) != len(images):
        raise BadImages(f"task {task_id!r}: {n} image placeholder(s) in the prompt for {len(images)} image(s)")
    for i, png in enumerate(images):
        try:
            Image.open(io.BytesIO(png)).load()
        except (OSError, UnidentifiedImageError, TypeError, ValueError) as err:
            raise BadImages(f"task {task_id!r}: image {i} does not decode ({err})") from None


def to_png(image, task_id: str) -> bytes:
    """One image of task task_id as PNG bytes; anything that does not decode is refused, naming the task."""
    try:
        if isinstance(image, (str, os.PathLike)):
            picture = Image.open(Path(image))
        elif isinstance(image, (bytes, bytearray, memoryview)):
            picture = Image.open(io.BytesIO(bytes(image)))
        elif isinstance(image, np.ndarray):
            picture = Image.fromarray(image)
        elif isinstance(image, Image.Image):
            picture = image
        else:
            raise TypeError(f"got {type(image).__name__}")
        picture = picture.convert("RGB")
    except (OSError, UnidentifiedImageError, TypeError, ValueError) as err:
        raise ValueError(f"task {task_id!r}: an image does not decode ({err}); expected a path to an image file, "
                         "encoded image bytes (PNG, JPEG, ...) or an HxWx3 uint8 array") from None
    out = io.BytesIO()
    picture.save(out, format="PNG")
    return out.getvalue()

