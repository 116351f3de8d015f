"""A task's images in Ray's object store: put once when the driver feeds the task, then referenced by every
sample of its group, the reward, the buffer and the learner; fetched where pixels are needed (the rollout engine's
request, the learner's batch). Checkpoints hold the bytes themselves, since a reference dies with its run."""

from __future__ import annotations

import ray

from rayrl.data.images import check_task_images
from rayrl.models.vision import PLACEHOLDER
from rayrl.types import Task, TrajectoryGroup


def put_images(tasks: list[Task]) -> tuple[list[Task], int]:
    """(the tasks with each one's images as one stored object, how many objects were put)."""
    out, puts = [], 0
    for t in tasks:
        if t.images:
            t = Task(t.id, t.prompt, t.answer, image_ref=ray.put(t.images))
            puts += 1
        out.append(t)
    return out, puts


async def task_images(task: Task) -> tuple[bytes, ...]:
    """A task's PNG images, from the object store when it holds them (inside an async actor), checked: BadImages
    names the task when they cannot be used."""
    images = await task.image_ref if task.image_ref is not None else task.images
    if images or PLACEHOLDER in task.prompt:
        check_task_images(task.prompt, images, task.id)
    return images


def with_images(groups: list[TrajectoryGroup]) -> list[TrajectoryGroup]:
    """The groups with their tasks' images fetched (one ray.get for all of them), references dropped."""
    refs = list(dict.fromkeys(g.task.image_ref for g in groups if g.task.image_ref is not None))
    if not refs:
        return groups
    images = dict(zip(refs, ray.get(refs)))
    return [TrajectoryGroup(Task(g.task.id, g.task.prompt, g.task.answer, images[g.task.image_ref]), g.samples)
            if g.task.image_ref is not None else g for g in groups]


def restored(groups: list[TrajectoryGroup]) -> tuple[list[TrajectoryGroup], int]:
    """Checkpointed groups (images inline) with their images put back into the object store."""
    tasks, puts = put_images([g.task for g in groups])
    return [TrajectoryGroup(t, g.samples) for t, g in zip(tasks, groups)], puts
