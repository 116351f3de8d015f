"""Run metrics: Prometheus counters and gauges through ray.util.metrics, a JSONL file, a progress bar, wandb."""

from __future__ import annotations

import json
import time
from pathlib import Path

from tqdm import tqdm

from rayrl.algorithms.mismatch import merge_mismatch


class RayMetrics:
    """An actor's counters and gauges through ray.util.metrics, tagged role= ("rollout") and worker=
    ("rollout-0"); Ray's metrics agent exports them to Prometheus and the dashboard's Metrics tab."""

    def __init__(self, role: str, worker: str, counters: dict[str, str], gauges: dict[str, str] | None = None) -> None:
        from ray.util.metrics import Counter, Gauge

        tags = {"role": role, "worker": worker}
        self._counters = {n: Counter(f"rayrl_{n}", description=d, tag_keys=tuple(tags)).set_default_tags(tags)
                          for n, d in counters.items()}
        self._gauges = {n: Gauge(f"rayrl_{n}", description=d, tag_keys=tuple(tags)).set_default_tags(tags)
                        for n, d in (gauges or {}).items()}

    def inc(self, name: str, value: float = 1.0) -> None:
        if value:
            self._counters[name].inc(value)

    def set(self, name: str, value: float) -> None:
        self._gauges[name].set(value)


class RunLog:
    """metrics.jsonl in the run directory, plus wandb when enabled."""

    def __init__(self, run_dir: Path, wandb_project: str | None, config: dict, wandb_mode: str,
                 run_id: str | None = None) -> None:
        """run_id: the wandb run to continue (a resumed run keeps its wandb run)."""
        self.file = (run_dir / "metrics.jsonl").open("a")
        self.wandb = None
        if wandb_project:
            import wandb

            self.wandb = wandb.init(project=wandb_project, dir=str(run_dir), config=config, mode=wandb_mode,
                                    id=run_id, resume="allow")

    @staticmethod
    def line(record: dict) -> str:
        return json.dumps(record) + "\n"

    def write(self, record: dict) -> None:
        self.file.write(self.line({"time": time.time(), **record}))
        self.file.flush()
        if self.wandb is not None:
            self.wandb.log(record, step=record.get("step"))

    def close(self) -> None:
        self.file.close()
        if self.wandb is not None:
            self.wandb.finish()


class Progress:
    """One bar: step, reward, accuracy, samples/s, staleness; tqdm supplies the ETA."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.bar = tqdm(total=total, desc="rayrl", unit="step", disable=not enabled, dynamic_ncols=True)

    def update(self, rec: dict) -> None:
        self.bar.set_postfix(reward=f"{rec['reward_mean']:.3f}", acc=f"{rec['accuracy']:.3f}",
                             sps=f"{rec['samples_per_s']:.0f}", stale=f"{rec['staleness_mean']:.2f}",
                             refresh=False)
        self.bar.update(1)

    def close(self) -> None:
        self.bar.close()


def merge_rank_stats(per_rank: list[dict]) -> dict:
    """One step's stats from every learner rank: counts add up, means are weighted, maxima stay maxima.

    Loss and grad norm are already global (reduced inside the step), so rank 0's are kept."""
    out = dict(per_rank[0])
    samples = sum(r["samples"] for r in per_rank)
    tokens = sum(r["tokens"] for r in per_rank)
    out.update(samples=samples, tokens=tokens, staleness_max=max(r["staleness_max"] for r in per_rank),
               sequence_tokens=sum(r.get("sequence_tokens", 0) for r in per_rank))
    if "mismatch_tokens" in out:
        out.update(merge_mismatch(per_rank))
    for key in ("reward_mean", "accuracy", "response_len_mean", "equal_reward_groups"):
        if key in out:
            out[key] = sum(r[key] * r["samples"] for r in per_rank) / max(1, samples)
    for key in ("staleness_mean", "sampled_nll_mean"):
        if key in out:
            out[key] = sum(r[key] * r["tokens"] for r in per_rank) / max(1, tokens)
    return out
