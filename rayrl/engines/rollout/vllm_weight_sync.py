"""The adapter between the project's weight transports and vLLM's weight-transfer API.

Every call into vLLM's init / start / update / finish weight-update methods goes through here,
so API drift between vLLM releases (0.26 on the GPU machine, 0.27-0.32 on CPU, 0.33's new
trainer API) is handled in one place. sync.transport=ipc bypasses vLLM's weight-transfer sessions: it
calls the project's worker extension through collective_rpc (vllm_ipc_extension).
"""

from __future__ import annotations

import inspect
import time

import msgspec

from rayrl.engines.transport.base import BucketPlan, GroupInfo
from rayrl.engines.transport.ipc import PayloadCache

# project transport -> the vLLM weight-transfer engine that receives it
VLLM_ENGINE_FOR_TRANSPORT = {"gloo": "rayrl_gloo", "nccl": "nccl"}
WORKER_EXTENSION = "rayrl.engines.rollout.vllm_gloo_engine.RayrlWorkerExtension"
IPC_EXTENSION = "rayrl.engines.rollout.vllm_ipc_extension.RayrlIpcExtension"
# rollout.bitwise_on_policy: the same per transport, importing the fixed-order residual norm (vllm_bitwise)
BITWISE_EXTENSION = {t: f"rayrl.engines.rollout.vllm_bitwise.{name}" for t, name in
                     (("nccl", "BitwiseExtension"), ("gloo", "BitwiseGlooExtension"), ("ipc", "BitwiseIpcExtension"))}


class VLLMWeightSync:
    def __init__(self, transport: str, bitwise: bool = False) -> None:
        if transport not in VLLM_ENGINE_FOR_TRANSPORT and transport != "ipc":
            raise ValueError(f"sync.transport '{transport}' has no vLLM receiver; "
                             f"use one of {sorted(VLLM_ENGINE_FOR_TRANSPORT) + ['ipc']}")
        self.transport, self.bitwise = transport, bitwise
        self.last_receive: dict = {}  # ipc: which path wrote the weights, and how long it took
        self.request = None  # full weights: requests carry no LoRA adapter
        self.payloads, self.forwarded = PayloadCache(), 0  # ipc: the learner's handles, and the key vLLM holds

    def close(self) -> None:
        """Nothing of its own to clean up (the LoRA variant removes its adapter directory)."""

    def engine_args(self) -> dict:
        """Keyword arguments for AsyncEngineArgs that switch weight transfer on."""
        args = {}
        if self.transport != "ipc":
            from vllm.config import WeightTransferConfig

            args["weight_transfer_config"] = WeightTransferConfig(backend=VLLM_ENGINE_FOR_TRANSPORT[self.transport])
        if self.bitwise:
            args["worker_extension_cls"] = BITWISE_EXTENSION[self.transport]
        elif self.transport != "nccl":  # gloo: the worker imports it, which registers the gloo engine there
            args["worker_extension_cls"] = IPC_EXTENSION if self.transport == "ipc" else WORKER_EXTENSION
        return args

    async def init(self, llm, group_info: GroupInfo) -> None:
        if self.transport == "ipc":  # no group: the handles come with each sync
            return
        from vllm.distributed.weight_transfer.base import WeightTransferInitRequest

        info = {"master_address": group_info.master_addr, "master_port": group_info.master_port,
                "rank_offset": group_info.rank, "world_size": group_info.world_size}
        if self.transport == "gloo":
            info.update(timeout_s=group_info.timeout_s, key=group_info.key)
        await llm.init_weight_transfer_engine(WeightTransferInitRequest(init_info=info))

    async def start(self, llm) -> None:
        if self.transport != "ipc":
            await llm.start_weight_update()

    async def receive(self, llm, plan) -> None:
        """plan: the BucketPlan (gloo, nccl), or the learner's IpcPayload or IpcRef (ipc)."""
        from vllm.distributed.weight_transfer.base import WeightTransferUpdateRequest

        if self.transport == "ipc":  # the handles once, then their key: the worker keeps what it opened
            t0 = time.perf_counter()
            payload = self.payloads.resolve(plan)
            arg = {"key": payload.key} if self.forwarded == payload.key else \
                msgspec.to_builtins(payload, builtin_types=(bytes,))  # plain data: no pickle in vLLM's RPC
            self.last_receive = (await llm.collective_rpc("rayrl_receive_ipc", args=(arg,)))[0]
            self.last_receive["rpc_s"] = time.perf_counter() - t0
            self.forwarded = payload.key
            return
        if self.transport == "gloo":
            info = {"plan": msgspec.to_builtins(plan)}
        else:
            specs = [s for bucket in plan.buckets for s in bucket]
            info = {"names": [s.name for s in specs], "dtype_names": [s.dtype for s in specs],
                    "shapes": [list(s.shape) for s in specs], "packed": True,
                    "packed_buffer_size_bytes": plan.bucket_bytes}
        await llm.update_weights(WeightTransferUpdateRequest(update_info=info))

    async def recheck(self, llm) -> None:
        """Bitwise mode, once the engine is ready to generate: the rows an ipc direct write wrote, read again."""
        if self.transport == "ipc" and self.last_receive.get("path") == "direct":
            self.last_receive["after_wake"] = (await llm.collective_rpc("rayrl_recheck_rows"))[0]

    async def finish(self, llm, version: int) -> None:
        if self.transport == "ipc":
            return
        if "weight_version" in inspect.signature(llm.finish_weight_update).parameters:  # vLLM >= 0.27
            await llm.finish_weight_update(weight_version=str(version))
        else:
            await llm.finish_weight_update()
