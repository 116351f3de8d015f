"""RewardScorers: a rollout worker's way to its reward actors. Groups go to the actors in turn, and those that
finish in the same event-loop turn share one call; held-out groups go through calls that skip the teacher, since
an evaluation is never trained on."""

from __future__ import annotations

from functools import partial

import ray

from rayrl.actors.peers import peer
from rayrl.coalesce import Coalescer
from rayrl.types import TrajectoryGroup


class RewardUnavailable(RuntimeError):
    """The reward actors could not score a group, even after their restarts."""


class RewardScorers:
    def __init__(self, rewards: list, namespace: str | None) -> None:
        """rewards: RewardActor handles or names in namespace."""
        handles = [peer(reward, namespace) for reward in rewards]
        self.train = [Coalescer(h.score_many.remote) for h in handles]
        self.held_out = [Coalescer(partial(h.score_many.remote, teach=False)) for h in handles]
        self.calls = 0

    async def __call__(self, group: TrajectoryGroup, held_out: bool = False) -> TrajectoryGroup:
        pool = self.held_out if held_out else self.train
        score = pool[self.calls % len(pool)]
        self.calls += 1
        try:
            return await score(group)
        except ray.exceptions.RayError as err:
            raise RewardUnavailable(str(err)) from err
