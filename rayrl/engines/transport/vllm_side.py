"""The vLLM end of a transport: the engine arguments that switch its receiver on and every call into vLLM's
weight-transfer API (init / start / update / finish), so API drift between vLLM releases (0.26 on GPUs, 0.27-0.32
on CPU, 0.33's new trainer API) is handled here. Each transport subclasses VLLMReceiver (or VLLMSession, for
vLLM's own weight-transfer engines) in its own module; vLLM is imported only when one is used."""

from __future__ import annotations

import asyncio
import inspect
from abc import ABC, abstractmethod
from collections.abc import Iterable

import torch

from rayrl.engines.transport.base import BucketPlan, GroupInfo

ROLLOUT = "rayrl.engines.rollout"
# the worker extensions (vLLM's worker_extension_cls) the transports name; bitwise mode's import the fixed-order norm
GLOO_EXTENSION = f"{ROLLOUT}.vllm_gloo_engine.RayrlWorkerExtension"
IPC_EXTENSION = f"{ROLLOUT}.vllm_ipc_extension.RayrlIpcExtension"


def to_wire(named: Iterable[tuple[str, torch.Tensor]]) -> list[tuple[str, str, list[int], bytes]]:
    """Tensors as plain data for vLLM's RPC (its msgpack hands untyped tensors over as lists)."""
    out = []
    for name, t in named:
        t = t.detach().to("cpu").contiguous()
        out.append((name, str(t.dtype).removeprefix("torch."), list(t.shape), t.view(torch.uint8).numpy().tobytes()))
    return out


def from_wire(items: list) -> list[tuple[str, torch.Tensor]]:
    return [(name, torch.frombuffer(bytearray(data), dtype=torch.uint8).view(getattr(torch, dtype)).reshape(shape))
            for name, dtype, shape, data in items]


class VLLMReceiver(ABC):
    """A transport's receiver inside a vLLM engine. `request` is what each generate call passes as its
    lora_request (None: full weights); `last_receive` the last sync's report (transport-specific fields)."""

    extension: str | None = None  # vLLM's worker_extension_cls for this transport (None: vLLM's own worker)
    bitwise_extension: str | None = None  # the same with the fixed-order norm (None: no bitwise mode over it)

    def __init__(self, bitwise: bool = False) -> None:
        self.bitwise = bitwise
        self.request = None
        self.last_receive: dict = {}

    def engine_args(self) -> dict:
        """Keyword arguments for AsyncEngineArgs that switch this receiver on."""
        if self.bitwise and self.bitwise_extension is None:
            raise ValueError(f"rollout.bitwise_on_policy: {type(self).__name__} has no bitwise worker extension")
        extension = self.bitwise_extension if self.bitwise else self.extension
        return {"worker_extension_cls": extension} if extension else {}

    async def init(self, llm, group_info: GroupInfo) -> None:
        """Join the sync group (nothing to join when the handles come with each sync)."""

    async def start(self, llm) -> None:
        """Open a weight update in vLLM, if the transport uses vLLM's sessions."""

    @abstractmethod
    async def receive(self, llm, meta) -> None:
        """Take one sync's weights (meta: what the learner's send returned, or the bucket plan)."""

    async def recheck(self, llm) -> None:
        """Bitwise mode, once the engine can generate again: what the sync wrote, read again (where checkable)."""

    async def finish(self, llm, version: int) -> None:
        """Close the weight update in vLLM, if the transport uses vLLM's sessions."""

    def close(self) -> None:
        """Nothing of its own to clean up."""

    async def write_adapters(self, llm, receiver, meta, scaling: float) -> dict:
        """lora.enabled, after the first sync: the adapters arrive in the engine's process (receiver) and reach
        vLLM's LoRA slot through its RPC."""
        items = await asyncio.to_thread(lambda: to_wire(receiver.receive(meta)))
        written = (await llm.collective_rpc("rayrl_write_lora", args=(items, scaling)))[0]
        return {"path": "lora_in_place", "tensors": written}


class VLLMSession(VLLMReceiver):
    """A transport received by one of vLLM's weight-transfer engines (registered under `backend`), through its
    init / start_weight_update / update_weights / finish_weight_update calls."""

    backend: str = ""

    def engine_args(self) -> dict:
        from vllm.config import WeightTransferConfig

        return {**super().engine_args(), "weight_transfer_config": WeightTransferConfig(backend=self.backend)}

    def init_info(self, group_info: GroupInfo) -> dict:
        g = group_info
        return {"master_address": g.master_addr, "master_port": g.master_port, "rank_offset": g.rank,
                "world_size": g.world_size}

    @abstractmethod
    def update_info(self, plan: BucketPlan) -> dict:
        """The update_info of vLLM's WeightTransferUpdateRequest for one sync."""

    async def init(self, llm, group_info: GroupInfo) -> None:
        from vllm.distributed.weight_transfer.base import WeightTransferInitRequest

        await llm.init_weight_transfer_engine(WeightTransferInitRequest(init_info=self.init_info(group_info)))

    async def start(self, llm) -> None:
        await llm.start_weight_update()

    async def receive(self, llm, meta: BucketPlan) -> None:
        from vllm.distributed.weight_transfer.base import WeightTransferUpdateRequest

        await llm.update_weights(WeightTransferUpdateRequest(update_info=self.update_info(meta)))

    async def finish(self, llm, version: int) -> None:
        if "weight_version" in inspect.signature(llm.finish_weight_update).parameters:  # vLLM >= 0.27
            await llm.finish_weight_update(weight_version=str(version))
        else:
            await llm.finish_weight_update()
