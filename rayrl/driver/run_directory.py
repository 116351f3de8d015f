"""A run's folder under metrics.run_dir: its name, the checkpoint it resumes from, and the files it writes."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

from rayrl import checkpoint
from rayrl.checkpoint import RunState
from rayrl.config import CheckpointConfig, Config, MetricsConfig
from rayrl.config import write_config_file


class RunDirectory:
    """metrics.run_dir/<run_name or start time>. A rerun of a name continues its newest checkpoint
    (checkpoint.resume=auto) or, with nothing to continue, gets name-2, name-3, ...: never appends to an earlier
    run. The checkpoint directory is checked for writing now, not at the first checkpoint."""

    def __init__(self, metrics: MetricsConfig, ckpt: CheckpointConfig) -> None:
        self.ckpt = ckpt
        name = metrics.run_name or datetime.now().strftime("%Y%m%d-%H%M%S")
        self.path = Path(metrics.run_dir) / name
        self.resume_from = checkpoint.find_resume(ckpt.resume, self.checkpoints)
        n = 2
        while self.resume_from is None and (self.path / "metrics.jsonl").exists():
            self.path, n = Path(metrics.run_dir) / f"{name}-{n}", n + 1
        checkpoint.check_writable(self.checkpoints)

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def checkpoints(self) -> Path:
        return Path(self.ckpt.dir).expanduser() if self.ckpt.dir else self.path / "checkpoints"

    def begin(self, cfg: Config) -> RunState | None:
        """Create the folder and write the resolved config; the state to continue from, if resuming (its later
        steps are redone: their lines leave the logs)."""
        self.path.mkdir(parents=True, exist_ok=True)
        write_config_file(cfg.model_dump(mode="json"), self.path / "config.yaml")
        if self.resume_from is None:
            return None
        state = checkpoint.load_state(self.resume_from)
        for log in ("metrics.jsonl", "trained.jsonl"):
            checkpoint.truncate_metrics(self.path / log, state.step)
        return state

    def write_json(self, name: str, value) -> Path:
        path = self.path / name
        path.write_text(json.dumps(value, indent=2))
        return path
