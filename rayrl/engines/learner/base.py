"""The LearnerBackend protocol every training backend implements."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

import torch

from rayrl.types import Batch


class LearnerBackend(Protocol):
    version: int

    def train_step(self, batch: Batch) -> dict[str, float]: ...

    def compute_logprobs(self, batch: Batch) -> torch.Tensor: ...

    def named_full_weights(self) -> Iterator[tuple[str, torch.Tensor]]: ...

    def weight_specs(self) -> list[tuple[str, tuple[int, ...], torch.dtype]]: ...

    def save(self, path: str) -> None: ...

    def load(self, path: str) -> None: ...
