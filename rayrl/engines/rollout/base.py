"""The RolloutEngine protocol every generation backend implements."""

from __future__ import annotations

from typing import Any, Protocol

from rayrl.types import GenerationRequest, Sample


class RolloutEngine(Protocol):
    """Built as Engine(model_path, cfg, num_threads, tokenizer); control calls are served while
    generate() calls are in flight, and a weight update lands between tokens of running requests."""

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
