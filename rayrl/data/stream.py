"""The training prompts as one numbered, endless sequence (reshuffled each epoch, from data.seed).

Position n is always the same task, and its id says n, so a resumed run re-feeds exactly the prompts
it had taken but not trained, and a sampling seed derived from the id repeats across a resume."""

from __future__ import annotations

from collections.abc import Iterable

from rayrl.data.arithmetic import endless
from rayrl.types import Task

SEP = "@"


def stream_position(task_id: str) -> int:
    return int(task_id.rsplit(SEP, 1)[1])


class PromptStream:
    def __init__(self, tasks: list[Task], seed: int) -> None:
        self._tasks = endless(tasks, seed)
        self.fed = 0  # positions handed out so far

    def take(self, n: int) -> list[Task]:
        out = []
        for _ in range(n):
            t = next(self._tasks)
            out.append(Task(f"{t.id}{SEP}{self.fed}", t.prompt, t.answer, t.images))
            self.fed += 1
        return out

    def restore(self, fed: int, pending: Iterable[int]) -> list[Task]:
        """Advance a fresh stream to `fed`; return the tasks at the pending positions, in order."""
        if self.fed:
            raise RuntimeError("restore() on a stream that already handed out prompts")
        want = set(pending)
        return [t for t in self.take(fed) if stream_position(t.id) in want]
