"""A workflow whose tasks sometimes arrive with an image that does not decode, as tasks made during a run might, for
tests/cpu/test_vision_pipeline.py (rollout.workflow by import string: `tests.cpu.faulty_images:EveryFifthBroken`)."""

from __future__ import annotations

from rayrl.types import Task
from rayrl.workflows.rlvr import SingleTurn

BROKEN = b"\x89PNG\r\n\x1a\n not a picture"


class EveryFifthBroken(SingleTurn):
    """Training tasks at stream positions divisible by 5 carry a broken image in place of theirs (held-out tasks,
    whose ids carry no position, keep theirs)."""

    async def arun_episode(self, engine, task: Task):
        if "@" in task.id and int(task.id.rsplit("@", 1)[1]) % 5 == 0:
            task = Task(task.id, task.prompt, task.answer, images=(BROKEN,))
        return await super().arun_episode(engine, task)
