"""Colocated GPU weight transport: the rollout engine on the learner's GPU reads the learner's weights through
CUDA IPC handles. In place (one learner rank whose tensors are its own parameters, updated in place): one handle
per parameter, and the engine casts them into its own weights, one device copy per sync. Otherwise learner
rank 0 packs its weights into buckets that live as long as it does and shares one handle per bucket.

Handles travel as plain ints and bytes (an IpcPayload), so vLLM's RPC carries them without pickle. They are
the same every sync: only the first sync after the group forms carries them; later ones carry their key (IpcRef).
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterable, Iterator

import msgspec
import torch
from torch.multiprocessing.reductions import rebuild_cuda_tensor, reduce_tensor

from rayrl.engines.transport.base import BucketPlan, GroupInfo, TensorSpec, checked_in_plan_order, unpack
from rayrl.engines.transport.vllm_side import IPC_EXTENSION, ROLLOUT, VLLMReceiver


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
    plan: BucketPlan  # in place: one bucket per tensor, in the learner's dtype (the receiver casts)
    buffers: list[SharedBuffer]  # one per bucket of the plan
    key: int = 0  # names these buffers: a later sync that reuses them sends only IpcRef(key)


class IpcRef(msgspec.Struct, frozen=True):
    """A sync after the first: the buffers of the payload named `key` hold the new weights."""

    key: int


def from_builtins(data: dict) -> IpcPayload | IpcRef:
    """An IpcPayload or IpcRef from the plain data vLLM's RPC carried."""
    return msgspec.convert(data, IpcPayload if "plan" in data else IpcRef)


class PayloadCache:
    """A receiver's last whole payload, so that a sync bringing only its key (IpcRef) finds the handles."""

    def __init__(self) -> None:
        self.payload: IpcPayload | None = None

    def resolve(self, meta: IpcPayload | IpcRef) -> IpcPayload:
        if isinstance(meta, IpcPayload):
            self.payload = meta
        elif self.payload is None or self.payload.key != meta.key:
            raise RuntimeError(f"sync.transport=ipc: buffers {meta.key} were never received here; the first sync "
                               "after the sync group forms carries them (form it again: WeightBroadcaster.rejoin)")
        return self.payload


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
    """Both ends: the sender shares its buffers (or parameters), a receiver opens them."""

    def __init__(self, in_place: bool = False) -> None:
        self.in_place = in_place  # sender: share the tensors themselves (they are the learner's own parameters)
        self._slots: list[torch.Tensor] = []  # packed: each tensor's place in its bucket, in plan order
        self._where: tuple[int, ...] = ()  # in place: the shared tensors' addresses
        self._payload: IpcPayload | None = None
        self._delivered = False  # the receivers hold the payload's handles: send its key only
        self.last_send: dict = {}  # sender: the last send's host walk and device copy (seconds), and its way
        # receiver: the sender's buffers by (allocation handle, offset in it), each opened once, and the
        # tensor views of the last payload (the same buffers and plan every sync)
        self._opened: dict[tuple[bytes, int, int], torch.Tensor] = {}
        self._received = PayloadCache()
        self._views: tuple[IpcPayload | None, list[tuple[str, torch.Tensor]]] = (None, [])

    def init(self, group_info: GroupInfo) -> None:
        """No rendezvous; the (re)formed group's receivers get the whole payload with the next sync."""
        self._delivered = False

    def send(self, named_tensors: Iterable[tuple[str, torch.Tensor]], plan: BucketPlan) -> IpcPayload | IpcRef:
        """In place: share the tensors (again only if one moved). Packed: copy (and cast) every tensor into its
        bucket. Then the payload, or its key once the receivers hold it."""
        t0 = time.perf_counter()
        tensors = [t for _, t in checked_in_plan_order(named_tensors, plan, cast=False)]
        t1 = time.perf_counter()
        if self.in_place and all(t.is_cuda and t.is_contiguous() for t in tensors):
            self._share_in_place(plan, tensors)
        else:
            if not self._slots or self._where:
                self._pack_buffers(plan)
            with torch.no_grad():
                torch._foreach_copy_(self._slots, tensors)  # one fused copy; casts to the plan's dtype on the way in
        torch.cuda.synchronize()  # the receiver reads on another stream of another process
        self.last_send = {"gather_s": t1 - t0, "copy_s": time.perf_counter() - t1, "in_place": bool(self._where)}
        if self._delivered:
            return IpcRef(self._payload.key)
        self._delivered = True
        return self._payload

    def _pack_buffers(self, plan: BucketPlan) -> None:
        buffers = [torch.empty(sum(s.nbytes for s in b), dtype=torch.uint8, device="cuda") for b in plan.buckets]
        self._slots = [t for b, buf in zip(plan.buckets, buffers) for _, t in unpack(buf, b)]
        self._new_payload(IpcPayload(plan, [share(b) for b in buffers]))
        self._where = ()

    def _share_in_place(self, plan: BucketPlan, tensors: list[torch.Tensor]) -> None:
        where = tuple(t.data_ptr() for t in tensors)
        if where == self._where:
            return
        specs = [TensorSpec(s.name, s.shape, str(t.dtype).removeprefix("torch."))
                 for s, t in zip((s for b in plan.buckets for s in b), tensors)]
        shared = [share(t.view(-1).view(torch.uint8)) for t in tensors]
        self._new_payload(IpcPayload(BucketPlan([[s] for s in specs], plan.bucket_bytes), shared))
        self._where, self._slots = where, []

    def _new_payload(self, payload: IpcPayload) -> None:
        self._payload = msgspec.structs.replace(payload, key=random.getrandbits(62) + 1)
        self._delivered = False

    def payload(self, meta: IpcPayload | IpcRef) -> IpcPayload:
        """The whole payload a sync's meta names (a later sync brings only its key)."""
        return self._received.resolve(meta)

    def receive(self, meta: IpcPayload | IpcRef) -> Iterator[tuple[str, torch.Tensor]]:
        """The sender's tensors, as views of its buffers (opened once per payload)."""
        payload, held = self._received.resolve(meta), self._views[0]
        if held is None or held.key != payload.key:
            self._opened = {}  # the sender's earlier buffers, if any: let go of them
            self._views = (payload, [v for bucket, shared in zip(payload.plan.buckets, payload.buffers)
                                     for v in unpack(self._open(shared), bucket)])
        return iter(self._views[1])

    def _open(self, shared: SharedBuffer) -> torch.Tensor:
        key = (shared.handle, shared.storage_offset, shared.offset)
        if key not in self._opened:
            self._opened[key] = open_shared(shared)
        return self._opened[key]


class VLLMIpcReceiver(VLLMReceiver):
    """vLLM's end, apart from vLLM's weight-transfer sessions: the worker extension opens the learner's buffers
    (collective_rpc with plain data: no pickle in vLLM's RPC) and writes vLLM's parameters directly. Its report:
    which path wrote the weights (direct or load_weights), seconds there and over the RPC."""

    extension = IPC_EXTENSION
    bitwise_extension = f"{ROLLOUT}.vllm_bitwise.BitwiseIpcExtension"

    def __init__(self, bitwise: bool = False) -> None:
        super().__init__(bitwise)
        self.payloads, self.forwarded = PayloadCache(), 0  # the learner's handles, and the key vLLM's worker holds

    async def receive(self, llm, meta: IpcPayload | IpcRef) -> None:
        """The handles once, then their key: the worker keeps what it opened."""
        t0 = time.perf_counter()
        payload = self.payloads.resolve(meta)
        arg = {"key": payload.key} if self.forwarded == payload.key else \
            msgspec.to_builtins(payload, builtin_types=(bytes,))
        self.last_receive = (await llm.collective_rpc("rayrl_receive_ipc", args=(arg,)))[0]
        self.last_receive["rpc_s"] = time.perf_counter() - t0
        self.forwarded = payload.key

    async def recheck(self, llm) -> None:
        """Bitwise mode: the rows a direct write wrote, read again after the engine woke."""
        if self.bitwise and self.last_receive.get("path") == "direct":
            self.last_receive["after_wake"] = (await llm.collective_rpc("rayrl_recheck_rows"))[0]

    async def write_adapters(self, llm, receiver: IpcTransport, meta, scaling: float) -> dict:
        """The worker opens the learner's adapter buckets itself (the whole payload: the engine's process and the
        worker are two receivers, and the worker may not have seen it)."""
        payload = msgspec.to_builtins(receiver.payload(meta), builtin_types=(bytes,))
        return (await llm.collective_rpc("rayrl_receive_lora_ipc", args=(payload, scaling)))[0]


class Ipc:
    """sync.transport=ipc: the learner and its rollout engines on one GPU, weights read through CUDA IPC handles."""

    name, collective = "ipc", False

    def requirements(self, c) -> str | None:
        if not (c.on_gpu and c.placement.mode in ("colocate", "share")):
            return ("sync.transport=ipc hands weights over inside one GPU: it needs GPUs (cluster.n_gpus_per_node "
                    "> 0) and placement.mode=colocate or share; otherwise use nccl or gloo")
        on_one_gpu = c.placement.mode == "share" and c.learner.num_workers == 1 \
            and c.rollout.num_workers == c.placement.rollouts_per_gpu
        if c.rollout.num_workers > 1 and not on_one_gpu:
            return (f"sync.transport=ipc hands learner rank 0's weights to rollout engines on its own GPU only: it "
                    f"needs rollout.num_workers=1 (got {c.rollout.num_workers}), or placement.mode=share with one "
                    "learner rank and placement.rollouts_per_gpu=rollout.num_workers; with more GPUs use "
                    "placement.mode=split and sync.transport=nccl")
        return None

    def sender(self, in_place: bool = False) -> IpcTransport:
        return IpcTransport(in_place)

    def receiver(self) -> IpcTransport:
        return IpcTransport()

    def vllm_receiver(self, bitwise: bool = False) -> VLLMIpcReceiver:
        return VLLMIpcReceiver(bitwise)


IPC = Ipc()
