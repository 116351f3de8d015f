"""EpisodeSet: the episodes a rollout worker runs now, each a task on the actor's loop. The first one to raise
keeps its error, which stops the worker's lease loop and is raised once the others have finished."""

from __future__ import annotations

import asyncio
import logging

from rayrl.data.images import BadImages

log = logging.getLogger("rayrl")


async def episode_or_reject(workflow, engine, task, totals: dict, label: str):
    """The workflow's episode for a task, or None (rejected) when the task's images cannot be used: seen only
    during the run, counted in totals["bad_images"] and logged, never a crash."""
    try:
        return await workflow.arun_episode(engine, task)
    except BadImages as why:
        log.warning("%s: task rejected: %s", label, why)
        totals["bad_images"] += 1
        return None


class EpisodeSet:
    def __init__(self, metrics) -> None:
        self.running: set[asyncio.Task] = set()
        self.error: BaseException | None = None
        self.metrics = metrics  # the worker's RayMetrics: the episodes-in-flight gauge

    def start(self, episode) -> None:
        job = asyncio.create_task(episode)
        self.running.add(job)
        job.add_done_callback(self._ended)
        self.metrics.set("rollout_episodes_in_flight", len(self.running))

    def _ended(self, job: asyncio.Task) -> None:
        self.running.discard(job)
        if not job.cancelled() and job.exception() is not None and self.error is None:
            self.error = job.exception()

    async def wait(self) -> None:
        """Until every running episode has ended; then the first error, if any."""
        await asyncio.gather(*self.running)
        if self.error is not None:
            raise self.error


def workflow_stats(workflow) -> dict:
    """The workflow's own counts (tool failures, malformed tool calls, ...), if it keeps any."""
    stats = getattr(workflow, "stats", None)
    return dict(stats()) if callable(stats) else {}
