"""sync.transport=nccl: GPU to GPU, learner rank 0 sends through vLLM's NCCL weight-transfer engine, vLLM's workers
receive with its own "nccl" engine.

The sender is the one place that knows vLLM's trainer API: the static trainer_init / trainer_send_weights of vLLM
0.26-0.32; 0.33 replaced them with WeightTransferTrainerFactory, which would be a second branch here. There is no
engine-process receiver: the hf engine and LoRA adapters (which arrive in the engine's process) use gloo or ipc.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from rayrl.engines.transport.base import BucketPlan, GroupInfo, checked_in_plan_order
from rayrl.engines.transport.vllm_side import ROLLOUT, VLLMSession


class NcclSender:
    def __init__(self) -> None:
        self._group = None

    def init(self, group_info: GroupInfo) -> None:
        if group_info.rank != 0:
            raise ValueError("the nccl transport sends from learner rank 0 only; vLLM's nccl engine receives")
        from vllm.distributed.weight_transfer.nccl_engine import NCCLWeightTransferEngine

        self._group = NCCLWeightTransferEngine.trainer_init({
            "master_address": group_info.master_addr, "master_port": group_info.master_port,
            "world_size": group_info.world_size})

    def send(self, named_tensors: Iterable[tuple[str, torch.Tensor]], plan: BucketPlan) -> None:
        from vllm.distributed.weight_transfer.nccl_engine import (
            NCCLTrainerSendWeightsArgs,
            NCCLWeightTransferEngine,
        )

        if self._group is None:
            raise RuntimeError("weight transport used before init()")
        args = NCCLTrainerSendWeightsArgs(group=self._group, packed=True,
                                          packed_buffer_size_bytes=plan.bucket_bytes)
        NCCLWeightTransferEngine.trainer_send_weights(checked_in_plan_order(named_tensors, plan), args)
        torch.cuda.synchronize()


class VLLMNcclReceiver(VLLMSession):
    """vLLM's own "nccl" engine in vLLM's worker: no extension of ours (bitwise mode's only imports the norm)."""

    backend = "nccl"
    bitwise_extension = f"{ROLLOUT}.vllm_bitwise.BitwiseExtension"

    def update_info(self, plan: BucketPlan) -> dict:
        specs = [s for bucket in plan.buckets for s in bucket]
        return {"names": [s.name for s in specs], "dtype_names": [s.dtype for s in specs],
                "shapes": [list(s.shape) for s in specs], "packed": True,
                "packed_buffer_size_bytes": plan.bucket_bytes}


class Nccl:
    """sync.transport=nccl: learner rank 0 broadcasts to vLLM's workers on other GPUs."""

    name, collective = "nccl", True

    def requirements(self, c) -> str | None:
        if not (c.on_gpu and c.rollout.engine == "vllm"):
            return ("sync.transport=nccl needs GPUs (cluster.n_gpus_per_node > 0) and rollout.engine=vllm; on CPU or "
                    "with rollout.engine=hf use sync.transport=gloo")
        if c.placement.mode == "share":
            return ("placement.mode=share puts the learner and the rollout engine on one GPU, where NCCL cannot form "
                    "a group (one device, two ranks): set sync.transport=ipc")
        if c.lora.enabled:
            return ("lora.enabled=true with sync.transport=nccl: the adapters arrive in the rollout engine's own "
                    "process, which vLLM's nccl engine does not reach; use sync.transport=gloo (adapters are small) "
                    "or ipc")
        return None

    def sender(self, in_place: bool = False) -> NcclSender:
        return NcclSender()

    def receiver(self) -> None:
        return None

    def vllm_receiver(self, bitwise: bool = False) -> VLLMNcclReceiver:
        return VLLMNcclReceiver(bitwise)


NCCL = Nccl()
