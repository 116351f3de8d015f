"""CriticWorker (one per rank) and CriticGroup: PPO's value model, a second learner group beside the
policy's, in the same placement bundles (each takes half of a learner bundle)."""

from __future__ import annotations

import ray

from rayrl.actors.learner import fetch_batch, init_process_group
from rayrl.batching import completion_values, place_completion_values
from rayrl.config import Config
from rayrl import components
from rayrl.actors.ranks import RankGroup
from rayrl.actors.state_copies import StateCopies


@ray.remote
class CriticWorker(StateCopies):
    def __init__(self, rank: int, world_size: int, cfg: Config, model_path: str, pad_id: int, num_threads: int,
                 master: tuple[str, int, str] | None = None) -> None:
        if cfg.learner.backend != "torch":
            init_process_group(cfg, rank, world_size, master)
        self.critic, self.pad_id = components.critic(cfg, model_path, num_threads), pad_id
        self.rank, self.state_owner, self.copies = rank, self.critic, {}  # failover's copies (StateCopies)

    def values(self, refs: list[list[ray.ObjectRef]]) -> dict[str, list]:
        """The values of this rank's groups' completion tokens, per task id (a 1-D tensor per sample)."""
        groups, batch = fetch_batch(refs, self.pad_id)
        return completion_values(batch, self.critic.values(batch), groups)

    def train(self, refs: list[list[ray.ObjectRef]], returns: dict, values: dict) -> dict[str, float]:
        groups, batch = fetch_batch(refs, self.pad_id)
        return self.critic.train_step(batch, place_completion_values(batch, groups, returns),
                                      place_completion_values(batch, groups, values))

    def save(self, path: str) -> None:
        self.critic.save(path)

    def load(self, path: str) -> None:
        self.critic.load(path)

    def ping(self) -> bool:
        return True


class CriticGroup(RankGroup):
    """learner.num_workers CriticWorker actors named critic-<rank>, sharded like the policy's ranks."""

    def __init__(self, cfg: Config, model_path: str, pad_id: int, placement, namespace: str | None = None) -> None:
        super().__init__(CriticWorker, "critic", cfg.learner.num_workers, placement, namespace, cfg, model_path, pad_id)

    def values(self, refs: list[list[ray.ObjectRef]]) -> list[ray.ObjectRef]:
        """Each rank's values of its shard (refs[r::n], as the learner ranks shard), by object ref: they go to
        the learner rank of the same shard without passing through the driver (a failed rank fails that call)."""
        n = len(self.workers)
        return [w.values.remote(refs[r::n]) for r, w in enumerate(self.workers)]

    def train(self, refs: list[list[ray.ObjectRef]], returns: list[ray.ObjectRef], values: list[ray.ObjectRef]
              ) -> dict[str, float]:
        """One step on every rank, each with its shard's returns and values (refs, one per rank); the losses are
        global already, so rank 0's stats stand for the group."""
        n = len(self.workers)
        return self._all([w.train.remote(refs[r::n], returns[r], values[r]) for r, w in enumerate(self.workers)],
                         "critic train")[0]
