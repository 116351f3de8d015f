"""The RewardModel protocol and what every reward model shares: the template a sample is shown through."""

from __future__ import annotations

from typing import Protocol

from rayrl.types import ModelScore, ScoreRequest


def render(template: str, request: ScoreRequest) -> str:
    """The template with its placeholders replaced (plain replacement: answers may hold braces)."""
    return (template.replace("{prompt}", request.prompt).replace("{reference}", request.reference)
            .replace("{answer}", request.answer))


class RewardModel(Protocol):
    """Built by rayrl.components.reward_model (judge, scorer); one score() call is one batched engine call."""

    async def score(self, requests: list[ScoreRequest]) -> list[ModelScore]: ...

    def shutdown(self) -> None: ...
