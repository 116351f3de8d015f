"""RolloutTable: the one record of a run's rollout workers. The actor system fills it with the workers it creates;
from then on the RolloutFleet changes it (a restart, a worker that joins or leaves) through its methods only, and
the actor system asks it for every handle when it closes. Workers started on a new node (rollout.fleet=elastic)
wait in it as starting until they join or are turned away."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class RolloutSlot:
    """One worker of the fleet. index: its name (rollout-<index>) and buffer id, kept while others come and go."""

    index: int
    handle: Any
    loop: Any = None  # its run() ref while it generates
    restarts: int = 0
    joined: bool = False  # joined the running job (elastic): it leaves when it dies, never restarted in place

    @property
    def name(self) -> str:
        return f"rollout-{self.index}"


class RolloutTable:
    def __init__(self, handles: list) -> None:
        self._slots = [RolloutSlot(i, h) for i, h in enumerate(handles)]
        self._starting: dict[int, Any] = {}  # index -> handle of a worker not in the fleet yet

    @property
    def slots(self) -> tuple[RolloutSlot, ...]:
        return tuple(self._slots)

    @property
    def handles(self) -> list:
        return [s.handle for s in self._slots]

    @property
    def names(self) -> list[str]:
        return [s.name for s in self._slots]

    def slot(self, index: int) -> RolloutSlot:
        return next(s for s in self._slots if s.index == index)

    def start(self, index: int, handle) -> None:
        """A worker created on a new node; it joins once its engine answers."""
        self._starting[index] = handle

    def join(self, index: int) -> RolloutSlot:
        slot = RolloutSlot(index, self._starting.pop(index), joined=True)
        self._slots.append(slot)
        return slot

    def turn_away(self, index: int):
        """A starting worker that will not join; returns its handle (to be killed)."""
        return self._starting.pop(index)

    def remove(self, index: int) -> RolloutSlot:
        slot = self.slot(index)
        self._slots.remove(slot)
        return slot

    def every_handle(self) -> list:
        """The fleet's workers and those still starting: what close() stops."""
        return [*self.handles, *self._starting.values()]
