"""RewardWatch: the reward actors' failures, counted by reason and written to reward_failures.json; a run
whose recent samples fail more than reward.max_failure_fraction is stopped naming the function, the reasons
and the first error, whether the driver is waiting for a batch or training."""

from __future__ import annotations

import time

import ray

from rayrl.config import RewardConfig, TeacherConfig
from rayrl.faults import RunStopped
from rayrl.progress import who_scores, who_teaches
from rayrl.rewards.scoring import failing, merge_stats


class RewardWatch:
    def __init__(self, rewards: list, reward: RewardConfig, run_dir, period_s: float, models: list = (),
                 teacher: TeacherConfig | None = None, teachers: list = ()) -> None:
        """period_s: how often check_due() asks the reward actors (rollout.queue_check_s); models, teachers: the
        reward model and teacher actors, whose calls usage() counts."""
        self.rewards, self.cfg, self.run_dir, self.period_s, self.models = rewards, reward, run_dir, period_s, models
        self.teacher, self.teachers = teacher or TeacherConfig(), teachers
        self.last_check = 0.0
        self.last_usage: dict = {}  # the models' totals at the last step_usage()

    def check(self) -> dict[str, int]:
        """Failed samples by reason so far; raises RunStopped once failures pass a bound."""
        self.last_check = time.monotonic()
        stats = merge_stats(ray.get([a.stats.remote() for a in self.rewards]))
        path = self.run_dir.write_json("reward_failures.json", stats)
        r = self.cfg
        model = who_scores(r) if r.model.kind != "none" else None
        if why := failing(stats, r.fn, r.max_failure_fraction, r.failure_window, r.max_failing_s, time.time(), model,
                          who_teaches(self.teacher)):
            raise RunStopped(f"{why}; details in {path}", exit_code=1)
        return {k: v for k, v in stats["counts"].items() if k != "ok"}

    def check_due(self) -> None:
        """check(), at most once per period: called while the driver waits for anything."""
        if time.monotonic() - self.last_check >= self.period_s:
            self.check()

    def usage(self) -> dict:
        """The reward models' totals (engine calls, samples, unparsable, busy seconds) beside the reward actors'
        calls; a restarted model actor counts from zero again."""
        # the models first: every engine call counted has its reward actor call counted too
        totals = _totals(self.models, ("engine_calls", "requests", "samples", "unparsable", "busy_s"),
                         self.cfg.model.timeout_s)
        calls = sum(a["calls"] for a in ray.get([a.stats.remote() for a in self.rewards]))
        return {**totals, "reward_calls": calls}

    def step_usage(self) -> dict:
        """Since the last call: with a reward model, its engine calls beside the reward actors' calls (batching's
        measure) and its busy seconds; with a teacher, its engine calls, tokens and busy seconds."""
        now = {**({f"reward_model_{k}": v for k, v in self.usage().items()} if self.models else {}),
               **({f"teacher_{k}": v for k, v in self.teacher_usage().items()} if self.teachers else {})}
        last, self.last_usage = self.last_usage, now
        return {k: now[k] - last.get(k, 0) for k in now if not k.endswith(("_requests", "_unparsable"))}

    def teacher_usage(self) -> dict:
        """The teachers' totals: engine calls, tokens scored, busy seconds (a restarted one counts from zero)."""
        return _totals(self.teachers, ("engine_calls", "tokens", "busy_s"), self.teacher.timeout_s)


def _totals(actors: list, keys: tuple, timeout_s: float) -> dict:
    """Each key's sum over the actors' stats(); zeros while one is restarting (no totals this time)."""
    try:
        per_actor = ray.get([a.stats.remote() for a in actors], timeout=timeout_s)
    except ray.exceptions.RayError:
        per_actor = []
    return {k: sum(a[k] for a in per_actor) for k in keys}
