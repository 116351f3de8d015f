"""The LearnerBackend protocol: the primitives a training backend supplies to the Learner."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from dataclasses import dataclass
from typing import Protocol

import torch

from rayrl.config import LoraConfig


@dataclass(frozen=True)
class LearnerSetup:
    """What a learner needs beyond its own sections (learner, algorithm), taken from the run's other sections by
    rayrl.components.learner_setup."""

    on_gpu: bool  # cluster.n_gpus_per_node > 0
    temperature: float  # rollout.temperature: tokens are scored at the sampling temperature
    max_new_tokens: int  # rollout.max_new_tokens: overlong shaping and seq_mean_token_sum_norm
    bitwise: bool  # rollout.bitwise_on_policy: score on vLLM's batch-invariant kernels
    kv_block_size: int  # vllm.kv_block_size: the page the bitwise attention reads
    num_threads: int  # torch threads (CPU)
    lora: LoraConfig | None = None  # lora.enabled: train adapters on a frozen base
    distill: bool = False  # teacher.enabled: every batch must carry the teacher's log-probs


class LearnerBackend(Protocol):
    """Built as Backend(learner_section, model, ref_model, device) from the Learner's loaded policy."""

    model: torch.nn.Module  # the callable forward (a sharded module, or DeepSpeed's engine)
    ref_model: torch.nn.Module | None  # frozen reference for the KL term; None when algorithm.beta == 0
    scheduler: torch.optim.lr_scheduler.LRScheduler
    whole_parameters: bool  # named_full_weights yields the parameters themselves, whole (one rank, on its device)

    def backward(self, loss: torch.Tensor, last: bool) -> None:
        """Accumulate gradients; last marks the final micro-batch before the optimizer step."""

    def step(self) -> float:
        """Clip, take the optimizer and LR-schedule step, zero gradients; returns the global grad norm.
        A non-finite norm skips the update where the backend can."""

    def discard_grads(self) -> bool:
        """Drop the gradients accumulated so far (a non-finite loss); False if the backend cannot."""

    def named_full_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """Every parameter, full, one at a time; gathered in lockstep on every rank."""

    def weight_specs(self) -> list[tuple[str, tuple[int, ...], torch.dtype]]:
        """(name, full shape, dtype) of every parameter, without communication."""

    def save(self, out: Path) -> None:
        """Model and optimizer state, sharded as the backend holds it (collective)."""

    def load(self, out: Path) -> None:
        """Restore what save wrote (collective)."""
