"""GPU weight transport, learner side of vLLM's native NCCL weight-transfer engine.

The rollout side is vLLM's own "nccl" engine (rollout.engine=vllm). This is the one place that
knows vLLM's trainer API: the static trainer_init / trainer_send_weights of vLLM 0.26-0.32;
0.33 replaced them with WeightTransferTrainerFactory, which would be a second branch here.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import torch

from rayrl.engines.transport.base import BucketPlan, GroupInfo, checked_in_plan_order


class NcclTransport:
    collective = True

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

    def receive(self, plan: BucketPlan) -> Iterator[tuple[str, torch.Tensor]]:
        raise NotImplementedError("sync.transport=nccl receives inside vLLM; use rollout.engine=vllm "
                                  "or sync.transport=gloo")
