"""PromptFeeder: the training prompts on their way to the buffer. It keeps the buffer's queue a few batches ahead
of what staleness admits (more with dynamic sampling, which uses more prompts than a batch a step), and knows
which fed prompts are not trained yet: what a checkpoint must regenerate, never lost and never trained twice."""

from __future__ import annotations

import ray

from rayrl.checkpoint import RunState
from rayrl.config import RolloutConfig
from rayrl.data import PromptStream, stream_position
from rayrl.image_refs import put_images, restored
from rayrl.types import Task, TrajectoryGroup


class PromptFeeder:
    def __init__(self, buffer, tasks: list[Task], seed: int, rollout: RolloutConfig, dynamic_sampling: bool) -> None:
        self.buffer, self.stream = buffer, PromptStream(tasks, seed)
        self.batch, self.lead = rollout.batch_size, rollout.max_staleness + rollout.prompt_lead_batches
        self.dynamic_sampling = dynamic_sampling
        self.untrained: set[int] = set()  # stream positions fed and not trained yet
        self.dropped_rewards = [0.0, 0]  # reward sum and count of samples dropped for equal rewards
        self.low_ref = None  # the buffer's answer once its queue runs low (dynamic sampling), one at a time
        self.image_puts = 0  # objects put for tasks' images: one per fed task that has any (never per sample)

    def restore(self, state: RunState, finished: list[TrajectoryGroup]) -> None:
        """A checkpoint's prompts: the stream at its position, and the fed prompts that neither were trained nor
        sit in the checkpoint's buffer fed again, in stream order."""
        done = {stream_position(g.task.id) for g in finished}
        refed = self.stream.restore(state.fed, [p for p in state.pending if p not in done])
        self.untrained.update(state.pending)
        if refed:
            ray.get(self.buffer.feed.remote(self._stored(refed)))

    def restored_groups(self, finished: list[TrajectoryGroup]) -> list[TrajectoryGroup]:
        """A checkpoint's finished groups with their images back in the object store."""
        groups, puts = restored(finished)
        self.image_puts += puts
        return groups

    def _stored(self, tasks: list[Task]) -> list[Task]:
        tasks, puts = put_images(tasks)
        self.image_puts += puts
        return tasks

    def feed_for(self, step: int) -> None:
        """Enough prompts fed for `step` and the lead beyond it."""
        self._feed_upto((self.lead + step) * self.batch)

    def _feed_upto(self, upto: int) -> None:
        if (n := upto - self.stream.fed) > 0:
            tasks = self.stream.take(n)
            self.untrained.update(stream_position(t.id) for t in tasks)
            ray.get(self.buffer.feed.remote(self._stored(tasks)))

    def low_prompts(self) -> list:
        """The pending 'queue below a batch' call (dynamic sampling), as a list to wait on; [] without one."""
        if self.dynamic_sampling and self.low_ref is None:
            self.low_ref = self.buffer.wait_prompts_below.remote(self.batch)
        return [self.low_ref] if self.low_ref is not None else []

    def top_up_if_low(self) -> None:
        """Dynamic sampling: once the queue ran low, another batch's worth of prompts."""
        if self.low_ref is not None and ray.wait([self.low_ref], timeout=0)[0]:
            self.forget_dropped()
            self._feed_upto(self.stream.fed + self.batch)
            self.low_ref = self.buffer.wait_prompts_below.remote(self.batch)

    def trained(self, task_ids: list[str]) -> None:
        self.untrained.difference_update(stream_position(t) for t in task_ids)

    def forget_dropped(self) -> None:
        """Groups dropped for equal rewards (or rejected) are done with: not pending, never regenerated; their
        rewards still count in the step's sampled reward."""
        ids, total, n = ray.get(self.buffer.take_dropped.remote())
        self.trained(ids)
        self.dropped_rewards = [self.dropped_rewards[0] + total, self.dropped_rewards[1] + n]

    def sampled_reward(self, reward_mean: float, samples: int) -> float:
        """The mean reward of every sample scored since the last step: the trained batch and the groups dynamic
        sampling dropped."""
        self.forget_dropped()
        (total, n), self.dropped_rewards = self.dropped_rewards, [0.0, 0]
        return (reward_mean * samples + total) / (samples + n)

    def run_state_part(self) -> tuple[int, list[int]]:
        """(prompts fed so far, the positions not trained yet), for a checkpoint."""
        self.forget_dropped()
        return self.stream.fed, sorted(self.untrained)
