"""ProgressWatch: the one judge of whether the learner's next batch can still arrive. The buffer tells it what
became of every finished group; while a batch is awaited it answers with the reason the run cannot go on (no
group trainable in rollout.max_idle_batches batches' worth, at least rollout.min_idle_groups, whatever the cause;
or nothing able to produce one for rollout.stall_s), naming the component at fault and the key to change, or None."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from rayrl.config import RewardConfig, RolloutConfig, TeacherConfig
from rayrl.faults import RunStopped

UNSCORED, EQUAL, REJECTED = "unscored", "equal_rewards", "rejected"


class NoProgress(RunStopped):
    """The learner's next batch can never arrive; the message says why and what to change."""


@dataclass(frozen=True)
class ProgressLimits:
    batch_size: int
    max_idle_batches: int  # batches' worth of finished groups with none trainable
    min_idle_groups: int  # ... and at least this many (a small batch of a hard task is idle often, for a while)
    stall_s: float  # seconds with nothing generating, nothing admissible and the batch short
    reward: str  # what scores the samples, as the messages name it
    workflow: str
    teacher: str = "the teacher"

    @classmethod
    def of(cls, rollout: RolloutConfig, reward: RewardConfig, teacher: TeacherConfig | None = None) -> ProgressLimits:
        return cls(rollout.batch_size, rollout.max_idle_batches, rollout.min_idle_groups, rollout.stall_s,
                   who_scores(reward), rollout.workflow, who_teaches(teacher or TeacherConfig()))

    @property
    def idle_groups(self) -> int:
        return max(self.max_idle_batches * self.batch_size, self.min_idle_groups)


def who_scores(reward: RewardConfig) -> str:
    """What gives the samples their rewards, as a stop message names it: the reward model if there is one."""
    m = reward.model
    if m.kind == "judge":
        return f"the judge (reward.model.kind=judge, reward.model.parser={m.parser})"
    if m.kind != "none":
        return f"the reward model (reward.model.kind={m.kind}, reward.model.path={m.path})"
    return f"the reward function (reward.fn={reward.fn})"


def who_teaches(teacher: TeacherConfig) -> str:
    return f"the teacher (teacher.path={teacher.path}, teacher.timeout_s={teacher.timeout_s:g})"


class ProgressWatch:
    def __init__(self, limits: ProgressLimits) -> None:
        self.limits = limits
        self.idle: Counter[str] = Counter()  # finished groups, by cause, since the last trainable one
        self.first: dict[str, str] = {}  # the first detail of each cause since then
        self.stalled_since: float | None = None

    def trainable(self) -> None:
        self.idle.clear()
        self.first.clear()

    def served(self) -> None:
        """A batch went out: a wait that stalled before it is over."""
        self.stalled_since = None

    def untrainable(self, cause: str, detail: str) -> None:
        self.idle[cause] += 1
        self.first.setdefault(cause, detail)

    def verdict(self, stall: str | None, now: float) -> str | None:
        """Why the batch can never come, or None. stall: why nothing can produce a group right now (None: something
        can); it counts once it has held for stall_s."""
        if why := self._idle():
            return why
        if stall is None:
            self.stalled_since = None
            return None
        self.stalled_since = self.stalled_since if self.stalled_since is not None else now
        if now - self.stalled_since < self.limits.stall_s:
            return None
        return f"{stall} (unchanged for {now - self.stalled_since:.0f}s, rollout.stall_s={self.limits.stall_s:g})"

    def _idle(self) -> str | None:
        lim, n = self.limits, sum(self.idle.values())
        if n < lim.idle_groups:
            return None
        cause, count = self.idle.most_common(1)[0]
        head = (f"no trainable group among the last {n} finished groups (rollout.max_idle_batches="
                f"{lim.max_idle_batches} batches of {lim.batch_size}, at least rollout.min_idle_groups="
                f"{lim.min_idle_groups}; {dict(self.idle)}): ")
        detail = self.first[cause]
        if cause == UNSCORED:
            who = lim.teacher if "without a teacher score" in detail else lim.reward
            return (head + f"{count} had samples that {who} left unscored, so no group was complete "
                    f"(first: {detail}). Fix {who}; its failures by reason are in reward_failures.json")
        if cause == EQUAL:
            return (head + f"in {count} every sample of the group had the same reward ({detail}), and dynamic "
                    f"sampling (algorithm.dynamic_sampling=true) dropped them: {lim.reward} gives the answers of a "
                    "prompt one score. Check it, or set algorithm.dynamic_sampling=false to train on such groups")
        return head + f"the workflow (rollout.workflow={lim.workflow}) rejected {count} tasks (first: {detail})"


def stall_reason(n: int, ready: int, running: int, queued: int, capacity: int, version: int, max_staleness: int,
                 batch_size: int, accepted: int) -> str | None:
    """Why get_batch(n) cannot be served by anything now running or admissible, or None."""
    if ready >= n or running > 0:
        return None
    if capacity <= 0:
        return (f"get_batch({n}) waits for {n - ready} more groups, none is being generated and admission is closed "
                f"at version {version}: {accepted} groups accepted >= (rollout.max_staleness {max_staleness} + "
                f"version {version} + 1) x batch {batch_size}. The version is the learner step of the last weight "
                "sync: a loop that trains K steps between WeightBroadcaster.sync() calls needs rollout.max_staleness "
                ">= K - 1, or sync after every step")
    if queued == 0:
        return (f"get_batch({n}) waits for {n - ready} more groups, none is being generated and no prompts are "
                "queued: feed the buffer more tasks (TrajectoryBuffer.feed)")
    return None
