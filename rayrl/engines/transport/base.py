"""What every weight transport implements (a TransportPlan: its sender, receivers and config requirements) and
the bucket plan both ends agree on."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Protocol

import msgspec
import torch


class GroupInfo(msgspec.Struct, frozen=True):
    """Rendezvous of one weight-sync group: learner rank 0 is rank 0 and hosts the store."""

    master_addr: str
    master_port: int
    world_size: int
    rank: int
    timeout_s: float
    key: str = ""  # unique to this group: names its rendezvous file on a loopback-only cluster


class TensorSpec(msgspec.Struct, frozen=True):
    name: str
    shape: tuple[int, ...]
    dtype: str  # e.g. "float32"

    @property
    def nbytes(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n * torch.empty((), dtype=getattr(torch, self.dtype)).element_size()


class BucketPlan(msgspec.Struct, frozen=True):
    """Tensors in send order, cut into buckets of at most bucket_bytes (one tensor may exceed it)."""

    buckets: list[list[TensorSpec]]
    bucket_bytes: int = 0  # the cut size; vLLM's packed NCCL engine needs the same on both ends

    @property
    def n_bytes(self) -> int:
        return sum(s.nbytes for b in self.buckets for s in b)

    @property
    def n_tensors(self) -> int:
        return sum(len(b) for b in self.buckets)


def plan_buckets(specs: Iterable[TensorSpec], bucket_bytes: int) -> BucketPlan:
    buckets: list[list[TensorSpec]] = [[]]
    size = 0
    for spec in specs:
        if buckets[-1] and size + spec.nbytes > bucket_bytes:
            buckets.append([])
            size = 0
        buckets[-1].append(spec)
        size += spec.nbytes
    return BucketPlan([b for b in buckets if b], bucket_bytes)


def pack(tensors: list[torch.Tensor]) -> torch.Tensor:
    """Concatenate tensors' bytes into one flat uint8 buffer."""
    return torch.cat([t.detach().contiguous().reshape(-1).view(torch.uint8) for t in tensors])


def unpack(buffer: torch.Tensor, specs: list[TensorSpec]) -> Iterator[tuple[str, torch.Tensor]]:
    offset = 0
    for s in specs:
        n = s.nbytes
        yield s.name, buffer[offset: offset + n].view(getattr(torch, s.dtype)).view(s.shape)
        offset += n


def checked_in_plan_order(named_tensors: Iterable[tuple[str, torch.Tensor]], plan: BucketPlan,
                          cast: bool = True) -> Iterator[tuple[str, torch.Tensor]]:
    """Pass tensors through (in the plan's dtype when cast), raising if one arrives out of the agreed order
    or shape."""
    it = iter(named_tensors)
    for spec in (s for bucket in plan.buckets for s in bucket):
        name, t = next(it)
        if name != spec.name or tuple(t.shape) != spec.shape:
            raise ValueError(f"weight order changed: expected {spec.name}{spec.shape}, got {name}{tuple(t.shape)}")
        yield name, t.to(getattr(torch, spec.dtype)) if cast else t


class WeightSender(Protocol):
    """Learner rank 0's end: send() consumes the tensors in plan order and returns what the receivers need (None
    for a collective transport, whose receivers take part in the send)."""

    def init(self, group_info: GroupInfo) -> None: ...

    def send(self, named_tensors: Iterable[tuple[str, torch.Tensor]], plan: BucketPlan) -> Any: ...


class WeightReceiver(Protocol):
    """A rollout engine's end, in the engine's own process (the hf engine; vLLM's LoRA adapters)."""

    def init(self, group_info: GroupInfo) -> None: ...

    def receive(self, meta: Any) -> Iterator[tuple[str, torch.Tensor]]: ...


class TransportPlan(Protocol):
    """Everything one way of moving weights owns, chosen once by sync.transport (rayrl.engines.registry): the
    configurations it refuses, the learner's sender, the engine-process receiver and the vLLM side (engine
    arguments, worker extension, bitwise variant, receive calls: rayrl.engines.transport.vllm_side)."""

    name: str
    collective: bool  # sender and receivers run at once (a broadcast); else the receivers read after send()

    def requirements(self, c: Any) -> str | None: ...  # the run's Config: why it cannot use this transport, or None

    def sender(self, in_place: bool) -> WeightSender: ...  # in_place: the tensors are the learner's own parameters

    def receiver(self) -> WeightReceiver | None: ...  # None: only vLLM's workers receive (no engine-process end)

    def vllm_receiver(self, bitwise: bool) -> Any: ...  # a vllm_side.VLLMReceiver
