"""The RolloutEngine protocol every generation backend implements."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from rayrl.config import LoraConfig
from rayrl.types import GenerationRequest, Sample


@dataclass(frozen=True)
class EngineSetup:
    """What a rollout engine needs beyond its own config section (hf or vllm), taken from the run's other
    sections by rayrl.components.engine_setup."""

    transport: str  # sync.transport: how new weights arrive
    on_gpu: bool  # cluster.n_gpus_per_node > 0
    seed: int  # the engine's own sampling seed (learner.seed)
    request_timeout_s: float  # rollout.request_timeout_s: past it a request is aborted
    bitwise: bool  # rollout.bitwise_on_policy
    sleeps: bool  # colocated on a GPU: the engine sleeps while the learner trains
    num_threads: int  # torch threads (CPU)
    lora: LoraConfig | None = None  # lora.enabled: sample with the adapters each sync brings


class RolloutEngine(Protocol):
    """Built as Engine(model_path, section, setup, tokenizer); control calls are served while generate()
    calls are in flight, and a weight update lands between tokens of running requests."""

    version: int  # the policy version new tokens are tagged with
    sync_ranks: int  # how many ranks this engine adds to the weight-sync group
    max_context: int  # prompt + completion tokens a request may hold (multi-turn episodes stop before it)

    async def generate(self, requests: list[GenerationRequest]) -> list[Sample]: ...

    async def pause(self) -> None: ...

    async def resume(self) -> None: ...

    async def init_weight_transfer(self, group_info: Any) -> None: ...

    async def sleep(self, level: int) -> None: ...  # colocated: free the device until the next weight update

    async def begin_weight_update(self) -> None: ...  # asleep: the weights come back, the cache after the sync

    async def receive_weights(self, meta: Any) -> None: ...

    async def end_weight_update(self, version: int) -> None: ...

    def stats(self) -> dict: ...  # "aborted", "timed_out", "tokens_generated" (in-flight requests included)

    def shutdown(self) -> None: ...
