"""Single-turn RLVR: the prompt template, group_size samples in one engine request, the reward function."""

from __future__ import annotations

from rayrl.types import Task, TrajectoryGroup
from rayrl.workflows.base import EpisodeEngine


class SingleTurn:
    def __init__(self, agent=None) -> None:
        """agent: the agent config section, which a single turn does not use."""

    async def arun_episode(self, engine: EpisodeEngine, task: Task) -> TrajectoryGroup:
        request = engine.sampling.request(task.id, engine.template.encode(task), images=await engine.images(task))
        samples = await engine.generate([request])
        return await engine.score(TrajectoryGroup(task, samples))
