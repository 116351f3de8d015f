"""On-policy distillation on CPU: the demo policy after the GRPO recipe teaches the warmed-up demo policy.

    python recipes/arithmetic_distill.py --config recipes/arithmetic_distill.yaml [teacher.path=DIR] [key=value ...]

Without teacher.path, the teacher is built first: recipes/arithmetic_grpo.yaml for TEACHER_STEPS steps from the
same demo policy (the same demo.* and data.* settings), its final export cached under demo.cache_dir by a hash of
that config, so later runs reuse it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import sys
from pathlib import Path

from rayrl.cli import run
from rayrl.config import load_config, parse_overrides
from rayrl.trainer import train

TEACHER_STEPS = 300
SHARED = ("demo", "data", "model", "rollout", "scheduler")  # the teacher's run takes these sections from the student's
OWN = ("rollout.seed",)  # ... but not the student's sampling seed: one teacher for every seed
log = logging.getLogger("rayrl")


def teacher_config(overrides: list[str], steps: int = TEACHER_STEPS):
    """The GRPO recipe with the student's demo, data and rollout settings, run to `steps`."""
    shared = [o for o in overrides if o.split("=", 1)[0].split(".")[0] in SHARED and o.split("=", 1)[0] not in OWN]
    return load_config(Path(__file__).with_name("arithmetic_grpo.yaml"), [
        *shared, f"learner.total_steps={steps}", "checkpoint.save_final=true", "checkpoint.every_steps=0",
        "checkpoint.resume=never", "metrics.progress=false", "eval.every_steps=0"])


def build_teacher(overrides: list[str], steps: int = TEACHER_STEPS) -> str:
    """The cached teacher's directory, trained first if this config has none yet."""
    cfg = teacher_config(overrides, steps)
    key = cfg.model_dump(mode="json", include={"demo", "data", "model", "rollout", "learner", "algorithm", "reward"})
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    out = Path(cfg.demo.cache_dir).expanduser() / f"distill-teacher-{digest}"
    if (out / "config.json").is_file():
        return str(out)
    log.info("building the distillation teacher: %d GRPO steps (cached in %s)", steps, out)
    runs = out.with_name(out.name + "-runs")
    summary = train(cfg.model_copy(update={"metrics": cfg.metrics.model_copy(update={
        "run_dir": str(runs), "run_name": "teacher"})}))
    shutil.copytree(Path(summary["run_dir"]) / "final", out.with_name(out.name + ".tmp"), dirs_exist_ok=True)
    out.with_name(out.name + ".tmp").rename(out)
    (out / "teacher_summary.json").write_text(json.dumps({k: summary[k] for k in (
        "eval_accuracy_before", "eval_accuracy_after", "steps")}, indent=2))
    return str(out)


def distill_config(config: str | None, overrides: list[str]):
    if "teacher" not in parse_overrides(overrides) or "path" not in parse_overrides(overrides)["teacher"]:
        overrides = [*overrides, f"teacher.path={build_teacher(overrides)}"]
    return load_config(config, overrides)


if __name__ == "__main__":
    import argparse

    p = argparse.ArgumentParser(prog="arithmetic_distill")
    p.add_argument("--config", default=str(Path(__file__).with_name("arithmetic_distill.yaml")))
    p.add_argument("overrides", nargs="*")
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    run(distill_config(args.config, args.overrides))
