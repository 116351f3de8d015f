"""CPU weight transport: a gloo process group of its own (TCPStore rendezvous), apart from any
default process group the learner uses, broadcasting one packed bucket at a time."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import timedelta

import msgspec
import torch
import torch.distributed as dist

from rayrl.engines.transport.base import BucketPlan, GroupInfo, checked_in_plan_order, pack, unpack
from rayrl.engines.transport.vllm_side import GLOO_EXTENSION, ROLLOUT, VLLMSession
from rayrl.rendezvous import LOOPBACK, rendezvous_file


class GlooTransport:
    """Both ends: rank 0 sends each packed bucket, every other rank receives it."""

    def __init__(self) -> None:
        self._pg = None
        self._store = None

    def init(self, group_info: GroupInfo) -> None:
        g, timeout = group_info, timedelta(seconds=group_info.timeout_s)
        if g.master_addr in LOOPBACK and g.key:  # one machine: a file rendezvous, gloo on 127.0.0.1
            self._store = dist.FileStore(rendezvous_file(g.key), g.world_size)
            options = dist.ProcessGroupGloo._Options()
            options._timeout = timeout
            options._devices = [dist.ProcessGroupGloo.create_device(hostname=g.master_addr)]
            self._pg = dist.ProcessGroupGloo(dist.PrefixStore("rayrl-weight-sync", self._store), g.rank, g.world_size,
                                             options)
            return
        self._store = dist.TCPStore(g.master_addr, g.master_port, g.world_size, is_master=g.rank == 0, timeout=timeout)
        self._pg = dist.ProcessGroupGloo(dist.PrefixStore("rayrl-weight-sync", self._store), g.rank, g.world_size,
                                         timeout)

    def send(self, named_tensors: Iterable[tuple[str, torch.Tensor]], plan: BucketPlan) -> None:
        """Consume tensors in plan order; broadcast each bucket as soon as it is full."""
        it = checked_in_plan_order(named_tensors, plan)
        for bucket in plan.buckets:
            self._broadcast(pack([next(it)[1] for _ in bucket]))

    def receive(self, plan: BucketPlan) -> Iterator[tuple[str, torch.Tensor]]:
        for bucket in plan.buckets:
            buffer = torch.empty(sum(s.nbytes for s in bucket), dtype=torch.uint8)
            self._broadcast(buffer)
            yield from unpack(buffer, bucket)

    def _broadcast(self, buffer: torch.Tensor) -> None:
        if self._pg is None:
            raise RuntimeError("weight transport used before init()")
        self._pg.broadcast(buffer, 0).wait()


class VLLMGlooReceiver(VLLMSession):
    """vLLM's end: the project's "rayrl_gloo" weight-transfer engine (vllm_gloo_engine), registered in vLLM's
    worker when the worker extension is imported there."""

    backend = "rayrl_gloo"
    extension = GLOO_EXTENSION
    bitwise_extension = f"{ROLLOUT}.vllm_bitwise.BitwiseGlooExtension"

    def init_info(self, group_info: GroupInfo) -> dict:
        return {**super().init_info(group_info), "timeout_s": group_info.timeout_s, "key": group_info.key}

    def update_info(self, plan: BucketPlan) -> dict:
        return {"plan": msgspec.to_builtins(plan)}


class Gloo:
    """sync.transport=gloo: a broadcast over gloo, on CPUs (any placement; GPU tensors pass through host memory)."""

    name, collective = "gloo", True

    def requirements(self, c) -> str | None:
        return None

    def sender(self, in_place: bool = False) -> GlooTransport:
        return GlooTransport()

    def receiver(self) -> GlooTransport:
        return GlooTransport()

    def vllm_receiver(self, bitwise: bool = False) -> VLLMGlooReceiver:
        return VLLMGlooReceiver(bitwise)


GLOO = Gloo()
