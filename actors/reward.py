"""RewardActor: scores groups on CPU with timeouts; failures become counted zero rewards. Calls from
several rollout episodes are served at once (threads; the trainer sets max_concurrency), so a step's
last groups do not queue behind each other. With a reward model (reward.model), the samples of every group
in a call go to a RewardModelActor in one request and its scores are combined with the rule's."""

from __future__ import annotations

from collections import Counter

import ray

from rayrl.actors.peers import peer
from rayrl.config import Config
from rayrl.metrics import RayMetrics
from rayrl.rewards import combine, teacher_scores
from rayrl.rewards.registry import load_reward_fn
from rayrl.rewards.scoring import FAILURES, GroupScorer
from rayrl.types import TrajectoryGroup

DESCRIPTIONS = {"ok": "samples scored", "error": "reward function raised", "timeout": "reward function timed out",
                "non_finite": "reward function returned NaN or inf",
                "wrong_type": "reward function returned a non-number",
                "unparsable": "reward model verdicts that did not parse", "model_timeout": "reward model timed out",
                "model_error": "reward model failed", "teacher_timeout": "teacher timed out",
                "teacher_error": "teacher failed or answered wrongly"}


@ray.remote(num_cpus=0)
class RewardActor:
    def __init__(self, cfg: Config, index: int = 0, search_path: list[str] | None = None,
                 reward_model=None, namespace: str | None = None, teacher=None) -> None:
        """search_path: where reward.fn's module may live besides sys.path (the driver's working directory).
        reward_model / teacher: the RewardModelActor (reward.model.kind other than none) and TeacherActor
        (teacher.enabled) this actor asks, by handle or by name in `namespace`."""
        r = cfg.reward
        self.section, self.reward_model = r.model, peer(reward_model, namespace)
        self.teacher, self.teacher_timeout_s = peer(teacher, namespace), cfg.teacher.timeout_s
        self.scorer = GroupScorer(load_reward_fn(r.fn, search_path), r.timeout_s, r.max_threads, r.failure_window,
                                  undecided_ok=r.model.combine == "fallback")
        self.metrics = RayMetrics("reward", f"reward-{index}",
                                  {f"reward_{k}_total": DESCRIPTIONS[k] for k in ("ok", *FAILURES)})
        self.calls = 0

    def score(self, group: TrajectoryGroup) -> TrajectoryGroup:
        return self.score_many([group])[0]

    def score_many(self, groups: list[TrajectoryGroup], teach: bool = True) -> list[TrajectoryGroup]:
        """Several groups in one call (a rollout worker's groups that finished together); with a reward model,
        their samples in one request to it. teach=False (held-out groups, never trained on): no teacher call."""
        self.calls += 1
        teacher = self.teacher if teach else None
        if self.reward_model is None and teacher is None:  # each group counted as soon as it is scored
            return [self._record(self.scorer.score(g, count=False)) for g in groups]
        groups = [self.scorer.score(g, count=False) for g in groups]
        if self.reward_model is not None:
            self._ask_model(groups)
        if teacher is not None:
            self._ask_teacher(groups)
        return [self._record(g) for g in groups]

    def _record(self, group: TrajectoryGroup) -> TrajectoryGroup:
        self.scorer.record(group)
        for status, n in Counter(s.reward_status for s in group.samples).items():
            if status in DESCRIPTIONS:
                self.metrics.inc(f"reward_{status}_total", n)
        return group

    def _ask_model(self, groups: list[TrajectoryGroup]) -> None:
        """A model that times out or dies leaves its samples unscored with the reason (never a hang)."""
        requests = combine.requests_for(groups, self.section)
        if not requests:
            return
        try:
            scores = ray.get(self.reward_model.score.remote(requests), timeout=self.section.timeout_s)
        except ray.exceptions.GetTimeoutError:
            scores = combine.failed("model_timeout", f"no scores within reward.model.timeout_s="
                                    f"{self.section.timeout_s}s", len(requests))
        except Exception as err:  # noqa: BLE001 - a dead actor or the engine's error: counted, never a crash
            scores = combine.failed("model_error", f"{type(err).__name__}: {str(err)[:200]}", len(requests))
        combine.apply(groups, scores, self.section)

    def _ask_teacher(self, groups: list[TrajectoryGroup]) -> None:
        """Every sample's teacher log-probs; a teacher that times out, dies or answers wrongly leaves them unscored."""
        requests = teacher_scores.requests_for(groups)
        try:
            scores = ray.get(self.teacher.score.remote(requests), timeout=self.teacher_timeout_s)
        except ray.exceptions.GetTimeoutError:
            return teacher_scores.failed(groups, "teacher_timeout", f"no log-probs within teacher.timeout_s="
                                         f"{self.teacher_timeout_s}s")
        except Exception as err:  # noqa: BLE001 - a dead actor or the engine's error: counted, never a crash
            return teacher_scores.failed(groups, "teacher_error", f"{type(err).__name__}: {str(err)[:200]}")
        teacher_scores.apply(groups, scores)

    def stats(self) -> dict:
        """Counts by status, the recent window's failures, the first messages of each failure reason, calls."""
        return {**self.scorer.stats(), "calls": self.calls}
