"""A vLLM weight-transfer engine over the project's gloo transport, for CPU runs of vLLM.

vLLM ships NCCL and IPC engines, both GPU-only. This one registers as "rayrl_gloo" with
vLLM's WeightTransferEngineFactory when vLLM's worker imports this module (it is the
worker_extension_cls), and receives the learner's packed buckets through GlooTransport.
"""

from __future__ import annotations

from dataclasses import dataclass

from vllm.distributed.weight_transfer.base import (
    WeightTransferEngine,
    WeightTransferInitInfo,
    WeightTransferUpdateInfo,
)
from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory

from rayrl.engines.rollout.vllm_lora_slots import LoraSlotsExtension
from rayrl.engines.transport.base import BucketPlan, GroupInfo
from rayrl.engines.transport.gloo import GlooTransport

GLOO_ENGINE_NAME = "rayrl_gloo"


@dataclass
class GlooInitInfo(WeightTransferInitInfo):
    master_address: str
    master_port: int
    rank_offset: int
    world_size: int
    timeout_s: float
    key: str = ""  # the group's rendezvous key: a loopback-only cluster meets in a file named by it


@dataclass
class GlooUpdateInfo(WeightTransferUpdateInfo):
    plan: dict  # a BucketPlan as builtins (msgspec.to_builtins)


class GlooWeightTransferEngine(WeightTransferEngine[GlooInitInfo, GlooUpdateInfo]):
    init_info_cls = GlooInitInfo
    update_info_cls = GlooUpdateInfo
    supports_draft_weight_update = False

    def init_transfer_engine(self, init_info: GlooInitInfo) -> None:
        p = self.parallel_config
        rank = init_info.rank_offset + p.data_parallel_index * p.world_size + p.rank
        self.transport = GlooTransport()
        self.transport.init(GroupInfo(init_info.master_address, init_info.master_port, init_info.world_size,
                                      rank, init_info.timeout_s, init_info.key))

    def start_weight_update(self) -> None:
        from vllm.model_executor.model_loader.reload import initialize_layerwise_reload

        initialize_layerwise_reload(self.model)

    def finish_weight_update(self) -> None:
        from vllm.model_executor.model_loader.reload import finalize_layerwise_reload

        finalize_layerwise_reload(self.model, self.model_config)

    def receive_weights(self, update_info: GlooUpdateInfo) -> None:
        import msgspec

        plan = msgspec.convert(update_info.plan, BucketPlan)
        for bucket in plan.buckets:
            self.model.load_weights(list(self.transport.receive(BucketPlan([bucket]))))

    def shutdown(self) -> None:
        self.transport = None

    @staticmethod
    def trainer_send_weights(iterator, trainer_args: dict) -> None:
        """vLLM's trainer-side call: trainer_args["transport"] (a GlooTransport, rank 0 of the group) sends the
        tensors in trainer_args["plan"]'s order, as learner rank 0 does."""
        trainer_args["transport"].send(iterator, trainer_args["plan"])


class RayrlWorkerExtension(LoraSlotsExtension):
    """Mixed into vLLM's worker (worker_extension_cls); importing this module registers the engine."""


if GLOO_ENGINE_NAME not in WeightTransferEngineFactory._registry:
    WeightTransferEngineFactory.register_engine(GLOO_ENGINE_NAME, GlooWeightTransferEngine)
