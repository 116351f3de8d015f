"""The Workflow protocol: one task's episodes, generation and reward in one coroutine.

A workflow is a class named by import string (rollout.workflow), built once per rollout worker as
Workflow(agent), with the agent config section (AgentConfig: tools, turns, timeouts, the agent function). Its arun_episode(engine, task) returns the task's scored TrajectoryGroup, or None to
reject the task (counted, never trained, never generated again)."""

from __future__ import annotations

import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from rayrl.data.template import PromptTemplate
from rayrl.types import GenerationRequest, Sample, Task, TrajectoryGroup


def request_seed(seed: int, task_id: str) -> int:
    """The same task id samples the same way in every run and after a resume."""
    return zlib.crc32(f"{seed}:{task_id}".encode())


@dataclass(frozen=True)
class Sampling:
    """How this call's episodes sample: group_size at the training temperature, or evaluation's settings."""

    n: int
    temperature: float
    max_new_tokens: int
    seed: int  # rollout.seed; request_seed(seed, key) gives each request its own stream
    ignore_eos: bool = False  # rollout.ignore_eos for training samples: exactly max_new_tokens each

    def request(self, key: str, prompt_ids: list[int], n: int | None = None,
                max_new_tokens: int | None = None, images: tuple[bytes, ...] = ()) -> GenerationRequest:
        """A request seeded by key (task id, plus sample and turn for multi-turn episodes)."""
        return GenerationRequest(key, prompt_ids, self.n if n is None else n,
                                 max_new_tokens or self.max_new_tokens, self.temperature,
                                 ignore_eos=self.ignore_eos, seed=request_seed(self.seed, key), images=images)


async def inline_images(task: Task) -> tuple[bytes, ...]:
    return task.images


@dataclass
class EpisodeEngine:
    """What an episode may use: the rollout engine (batched with every other episode of the worker),
    the reward actors, the tokenizer and template, and, for OpenAI-client agents, the gateway."""

    generate: Callable[[list[GenerationRequest]], Awaitable[list[Sample]]]
    score: Callable[[TrajectoryGroup], Awaitable[TrajectoryGroup]]
    template: PromptTemplate
    sampling: Sampling
    max_context: int  # prompt + completion tokens the model takes
    gateway: Any = None  # the run's Gateway actor handle (OpenAI-compatible endpoint), if it has one
    gateway_url: str = ""
    worker: int = 0  # the rollout worker running the episode: the gateway routes its sessions there
    images: Callable[[Task], Awaitable[tuple[bytes, ...]]] = inline_images  # a task's PNGs (rayrl.image_refs)

    @property
    def tokenizer(self):
        return self.template.tokenizer


class Workflow(Protocol):
    def __init__(self, agent: Any) -> None: ...

    async def arun_episode(self, engine: EpisodeEngine, task: Task) -> TrajectoryGroup | None: ...
