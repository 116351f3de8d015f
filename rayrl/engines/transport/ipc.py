"""Colocated GPU weight transport: learner rank 0 packs its weights into buckets that live as long as
it does, shares one CUDA IPC handle per bucket, and the rollout engine on the same GPU reads them.

Handles travel as plain ints and bytes (an IpcPayload), so vLLM's RPC carries them without pickle.
The receiving process opens each handle once and keeps it; a sync after the first is two device copies.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator

import msgspec
import torch
from torch.multiprocessing.reductions import rebuild_cuda_tensor, reduce_tensor

from rayrl.engines.transport.base import BucketPlan, GroupInfo, checked_in_plan_order, unpack


class SharedBuffer(msgspec.Struct, frozen=True):
    """One CUDA IPC handle of a flat uint8 buffer, as torch's reduce_tensor gives it, minus the classes."""

    gpu_uuid: str
    numel: int
    offset: int
    handle: bytes
    storage_bytes: int
    storage_offset: int
    ref_counter: bytes
    ref_counter_offset: int
    event: bytes
    event_sync: bool


class IpcPayload(msgspec.Struct, frozen=True):
    plan: BucketPlan
    buffers: list[SharedBuffer]  # one per bucket of the plan


def gpu_uuid(index: int) -> str:
    return str(torch.cuda.get_device_properties(index).uuid)


def share(buffer: torch.Tensor) -> SharedBuffer:
    _rebuild, args = reduce_tensor(buffer)
    (_cls, _size, _stride, offset, _storage_cls, _dtype, device, handle, storage_bytes, storage_offset,
     _grad, ref_counter, ref_counter_offset, event, event_sync) = args
    return SharedBuffer(gpu_uuid(device), buffer.numel(), offset, handle, storage_bytes, storage_offset,
                        ref_counter, ref_counter_offset, event, event_sync)


def open_shared(shared: SharedBuffer) -> torch.Tensor:
    """The sender's buffer, in this process; it must run on the same physical GPU."""
    local = [i for i in range(torch.cuda.device_count()) if gpu_uuid(i) == shared.gpu_uuid]
    if not local:
        raise RuntimeError(f"sync.transport=ipc: the learner's GPU {shared.gpu_uuid} is not visible to this rollout "
                           "engine; ipc needs both on one GPU (placement.mode=colocate or share)")
    s = shared
    return rebuild_cuda_tensor(torch.Tensor, torch.Size([s.numel]), (1,), s.offset, torch.storage.TypedStorage,
                               torch.uint8, local[0], s.handle, s.storage_bytes, s.storage_offset, False,
                               s.ref_counter, s.ref_counter_offset, s.event, s.event_sync)


class IpcTransport:
    collective = False

    def __init__(self) -> None:
        self._buffers: list[torch.Tensor] = []
        self._slots: list[torch.Tensor] = []  # sender: each tensor's place in its bucket, in plan order
        self._shared: list[SharedBuffer] = []
        self.last_send: dict[str, float] = {}  # sender: the last send's host walk and device copy, in seconds
        # receiver: the sender's buffers by (allocation handle, offset in it), each opened once, and the
        # tensor views of the last payload (the same buffers and plan every sync)
        self._opened: dict[tuple[bytes, int, int], torch.Tensor] = {}
        self._views: tuple[IpcPayload | None, list[tuple[str, torch.Tensor]]] = (None, [])

    def init(self, group_info: GroupInfo) -> None:
        """No rendezvous: the handles go with each sync."""

    def send(self, named_tensors: Iterable[tuple[str, torch.Tensor]], plan: BucketPlan) -> IpcPayload:
        """Copy (and cast) every tensor into its bucket, then hand out the buckets' handles."""
        if not self._buffers:
            self._buffers = [torch.empty(sum(s.nbytes for s in b), dtype=torch.uint8, device="cuda")
                             for b in plan.buckets]
            self._slots = [t for b, buf in zip(plan.buckets, self._buffers) for _, t in unpack(buf, b)]
            self._shared = [share(b) for b in self._buffers]
        t0 = time.perf_counter()
        tensors = [t for _, t in checked_in_plan_order(named_tensors, plan, cast=False)]
        t1 = time.perf_counter()
        with torch.no_grad():
            torch._foreach_copy_(self._slots, tensors)  # one fused copy; casts to the plan's dtype on the way in
        torch.cuda.synchronize()  # the receiver reads on another stream of another process
        self.last_send = {"gather_s": t1 - t0, "copy_s": time.perf_counter() - t1}
        return IpcPayload(plan, self._shared)

    def receive(self, payload: IpcPayload) -> Iterator[tuple[str, torch.Tensor]]:
        if self._views[0] != payload:
            self._views = (payload, [v for bucket, shared in zip(payload.plan.buckets, payload.buffers)
                                     for v in unpack(self._open(shared), bucket)])
        return iter(self._views[1])

    def _open(self, shared: SharedBuffer) -> torch.Tensor:
        key = (shared.handle, shared.storage_offset, shared.offset)
        if key not in self._opened:
            self._opened[key] = open_shared(shared)
        return self._opened[key]
