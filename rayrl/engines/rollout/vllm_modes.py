"""Rollout engine modes on vLLM: what bitwise on-policy and LoRA change in an engine, chosen once at build time.
A mode names the receiver of each sync's weights, the engine arguments and environment it adds, and how many
ranks the engine adds to the sync group; the engine itself runs the common path."""

from __future__ import annotations

from rayrl.config import VLLMConfig
from rayrl.engines.registry import transport_plan
from rayrl.engines.rollout.base import EngineSetup
from rayrl.engines.rollout.vllm_lora import VLLMAdapterSync

# bitwise on-policy with CUDA graphs: whole decode steps replayed from graphs of the eager kernels (no torch.compile,
# which would fuse norms and activations into kernels the learner does not run); prefills stay eager
BITWISE_GRAPHS = {"mode": 0, "cudagraph_mode": "FULL_DECODE_ONLY"}


class FullWeights:
    """Full weights over the transport's vLLM receiver, on vLLM's own kernels."""

    def __init__(self, setup: EngineSetup, v: VLLMConfig) -> None:
        self.weights = transport_plan(setup.transport).vllm_receiver(False)
        self.sync_ranks = v.tensor_parallel_size  # vLLM's workers join the sync group

    def engine_args(self, v: VLLMConfig) -> dict:
        return self.weights.engine_args()

    def environment(self) -> dict[str, str]:
        """Variables vLLM reads from its environment (its engine process inherits them)."""
        return {}


class BitwiseWeights(FullWeights):
    """rollout.bitwise_on_policy: vLLM's batch-invariant kernels, the learner's KV page size, CUDA graphs of the
    eager kernels, and the transport's receiver that also reads back what each sync wrote."""

    def __init__(self, setup: EngineSetup, v: VLLMConfig) -> None:
        self.weights = transport_plan(setup.transport).vllm_receiver(True)
        self.sync_ranks = v.tensor_parallel_size

    def engine_args(self, v):
        graphs = {} if v.enforce_eager else {"compilation_config": BITWISE_GRAPHS}
        return {**self.weights.engine_args(), "block_size": v.kv_block_size, **graphs}

    def environment(self):
        return {"VLLM_BATCH_INVARIANT": "1"}


class AdapterWeights(FullWeights):
    """lora.enabled: the adapters arrive in the engine's own process (one sync rank) and reach vLLM's LoRA slot."""

    def __init__(self, setup: EngineSetup, v: VLLMConfig) -> None:
        self.weights = VLLMAdapterSync(transport_plan(setup.transport), setup.lora)
        self.sync_ranks = 1


def engine_mode(setup: EngineSetup, v: VLLMConfig) -> FullWeights:
    """The mode the run's sections choose (the config rules refuse bitwise with LoRA)."""
    if setup.lora is not None:
        return AdapterWeights(setup, v)
    return (BitwiseWeights if setup.bitwise else FullWeights)(setup, v)
