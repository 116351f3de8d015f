"""The RolloutEngine protocol every generation backend implements."""

from __future__ import annotations

from typing import Any, Protocol

from rayrl.types import GenerationRequest, Sample


class RolloutEngine(Protocol):
    version: int

    async def generate(self, requests: list[GenerationRequest]) -> list[Sample]: ...

    def pause(self) -> None: ...

    def resume(self) -> None: ...

    def init_weight_transfer(self, group_info: Any) -> None: ...

    def begin_weight_update(self) -> None: ...

    def receive_weights(self, meta: Any) -> None: ...

    def end_weight_update(self, version: int) -> None: ...
