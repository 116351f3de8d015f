"""StepReporter: where a step's numbers go. metrics.jsonl (and wandb), the progress bar, Prometheus gauges
of role=driver beside the actors' own, and the run summary's view of the rollout-learner mismatch."""

from __future__ import annotations

from rayrl.algorithms.mismatch import MISMATCH_KEYS, summarize_mismatch
from rayrl.config import Config
from rayrl.metrics import Progress, RayMetrics, RunLog
from rayrl.types import WeightVersion

GAUGES = {"learner_step_seconds": "the last step's training time", "learner_tokens_per_second": "trained tokens/s",
          "sync_seconds": "the last weight sync",
          "sync_pause_seconds": "the part of the last weight sync spent pausing the rollout workers",
          "sync_gb_per_second": "the last weight sync's GB/s",
          "staleness_mean": "mean policy-version lag of the last batch",
          "rollout_restarts": "rollout worker restarts in this run",
          "sampled_reward_mean": "mean reward of the samples scored for the last step",
          "mismatch_abs_mean": "mean |rollout - learner log-prob| of the last step's fresh tokens",
          "token_mult_prob_error": "mean exp|rollout - learner log-prob| of the last step's fresh tokens",
          "mismatch_max": "the last step's worst token gap",
          "correction_frac": "share of tokens the off-policy correction masked or truncated in the last step",
          "fleet_size": "rollout workers now", "fleet_joins": "rollout workers that joined the run",
          "fleet_leaves": "rollout workers that left the run (drained or lost)"}
PASSED_THROUGH = ("sampled_reward_mean", "mismatch_abs_mean", "token_mult_prob_error", "mismatch_max",
                  "correction_frac", "fleet_size", "fleet_joins", "fleet_leaves")


class StepReporter:
    def __init__(self, run_dir, cfg: Config, wandb_id: str, total_steps: int) -> None:
        m, self.wandb_id = cfg.metrics, wandb_id
        self.log = RunLog(run_dir.path, m.wandb_project if m.wandb else None, cfg.model_dump(mode="json"),
                          m.wandb_mode, wandb_id)
        self.trained = (run_dir.path / "trained.jsonl").open("a")  # which tasks each step trained on
        self.progress = Progress(total_steps, m.progress)
        self.gauges = RayMetrics("driver", "driver", {"learner_steps_total": "training steps taken"}, GAUGES)
        self.mismatch: list[dict] = []  # this process's steps, for the summary's mismatch view

    def batch(self, step: int, metas: list) -> None:
        """The tasks a step trains on, on disk before the step's checkpoint can be."""
        self.trained.write(RunLog.line({"step": step, "tasks": [m.task_id for m in metas],
                                        "versions": [m.version for m in metas], "workers": [m.worker for m in metas]}))
        self.trained.flush()

    def step(self, rec: dict, synced: WeightVersion, restarts: int) -> None:
        self.log.write(rec)
        self.mismatch.append({k: rec[k] for k in MISMATCH_KEYS if k in rec})
        self.progress.update(rec)
        g = self.gauges
        g.inc("learner_steps_total")
        g.set("learner_step_seconds", rec["train_s"])
        g.set("learner_tokens_per_second", rec["tokens"] / max(rec["train_s"], 1e-9))
        g.set("sync_seconds", synced.seconds)
        g.set("sync_pause_seconds", synced.pause_s)
        g.set("sync_gb_per_second", synced.n_bytes / 1e9 / max(synced.seconds, 1e-9))
        g.set("staleness_mean", rec["staleness_mean"])
        g.set("rollout_restarts", restarts)
        for key in PASSED_THROUGH:
            if key in rec:
                g.set(key, rec[key])

    def mismatch_summary(self) -> dict:
        return summarize_mismatch(self.mismatch)

    def close(self, summary: dict | None = None) -> None:
        self.progress.close()
        self.trained.close()
        if summary is not None:
            self.log.write({"summary": summary})
        self.log.close()
