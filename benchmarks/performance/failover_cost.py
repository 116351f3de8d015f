"""What learner failover costs and how fast it mends: the arithmetic recipe with 2 FSDP2 ranks on gloo, run with
the in-memory copies off, on, and on with rank 1 SIGKILLed mid-run, repeated with the order alternating.
--gpus N (3 or more): async_vs_sync's split setting instead (vLLM CUDA graphs on N - 2 GPUs, a compiled FSDP2
learner of 2 ranks over NCCL, random weights of --shape), where the copy should hide behind generation.

    python -m benchmarks.performance.failover_cost [--repeats 3] [--steps 40] [--warmup 5] [key=value ...]
    python -m benchmarks.performance.failover_cost --gpus 3 --shape 1.5b --repeats 2 --steps 24 --warmup 8

Per run: the mean step time over the steps after --warmup (the killed run's recovery step left out and reported
apart: the seconds from the failure to the group trained again), and the copy's share: step time with copies
over without, in the same repeat. One table and a JSON in benchmarks/results/.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import tempfile
import threading
import time
from pathlib import Path

import ray

from benchmarks.common import benchmark_parser, print_table, spread, write_result
from benchmarks.performance.async_vs_sync import gpu_overrides
from benchmarks.performance.learner_mfu import SHAPES
from rayrl.config import load_config
from rayrl.models.tokenizer import TEXT_CHARS
from rayrl.testing.random_qwen2 import save_random_qwen2
from rayrl.trainer import train

VARIANTS = {"off": ["learner.failover=false"], "on": ["learner.failover=true"], "killed": ["learner.failover=true"]}


def _kill_rank_when(run_dir: Path, namespace: str, step: int) -> threading.Thread:
    """A thread that SIGKILLs learner-1's process once `step` is in the run's metrics."""

    def run() -> None:
        metrics = run_dir / "metrics.jsonl"
        while not metrics.exists() or sum('"step"' in x for x in metrics.read_text().splitlines()) < step:
            time.sleep(0.05)
        actor = ray.get_actor("learner-1", namespace=namespace)
        os.kill(ray.get(actor.__ray_call__.remote(lambda self: os.getpid())), signal.SIGKILL)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def run_variant(variant: str, args, setting: list[str], runs: Path, rep: int) -> dict:
    """setting: the GPU setting's overrides (none on CPU); the command line's come last."""
    name = f"failover-{variant}-{rep}"
    cfg = load_config(None if args.gpus else "recipes/arithmetic_grpo.yaml", [*setting,
        "learner.backend=fsdp", "learner.num_workers=2", f"learner.total_steps={args.steps}", "eval.every_steps=0",
        "checkpoint.save_final=false", "checkpoint.every_steps=0", "metrics.progress=false", f"metrics.run_dir={runs}",
        f"metrics.run_name={name}", "scheduler.include_dashboard=false", *VARIANTS[variant], *args.overrides])
    if variant == "killed":
        _kill_rank_when(runs / name, f"rayrl-{name}", args.steps // 2)
    summary = train(cfg)
    recs = [r for r in map(json.loads, (Path(summary["run_dir"]) / "metrics.jsonl").read_text().splitlines())
            if "step" in r]
    recovered = {r["failed_at_step"] for r in summary["learner_recoveries"]}
    window = [r["step_s"] for r in recs[args.warmup:] if r["step"] not in recovered]
    return {"repeat": rep, "variant": variant, "step_s": statistics.mean(window), "steps_in_window": len(window),
            "per_step_s": [r["step_s"] for r in recs], "recoveries": summary["learner_recoveries"],
            "accuracy_after": summary["eval_accuracy_after"]}


def main() -> None:
    p = benchmark_parser(__doc__)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--gpus", type=int, default=0, help="0: CPU (gloo); 3 or more: split over NCCL, 2 learner GPUs")
    p.add_argument("--shape", choices=sorted(SHAPES), default="1.5b", help="with --gpus: the model's shape")
    p.add_argument("overrides", nargs="*")
    args = p.parse_args()
    if args.gpus and args.gpus < 3:
        p.error(f"--gpus {args.gpus}: give 0 (CPU) or 3 or more (2 learner GPUs and a vLLM worker on each other)")
    runs, out = Path(tempfile.mkdtemp()), []
    setting = []
    if args.gpus:
        model = save_random_qwen2(runs / f"qwen2-{args.shape}", chars=TEXT_CHARS, **SHAPES[args.shape])
        setting = gpu_overrides(args.gpus, model, shape=args.shape, learner_gpus=2)
    for rep in range(args.repeats):
        order = list(VARIANTS) if rep % 2 == 0 else list(VARIANTS)[::-1]
        for variant in order:
            out.append(run_variant(variant, args, setting, runs, rep))
            print(f"repeat {rep} {variant}: step {out[-1]['step_s']:.3f} s", flush=True)
    by = lambda v: {r["repeat"]: r for r in out if r["variant"] == v}  # noqa: E731
    off, on = by("off"), by("on")
    ratios = [on[k]["step_s"] / off[k]["step_s"] for k in off if k in on]
    rec_s = [rec["seconds"] for r in out for rec in r["recoveries"]]
    rows = [{"variant": v, "step_s": spread([r["step_s"] for r in out if r["variant"] == v])["median"],
             "runs": sum(r["variant"] == v for r in out)} for v in VARIANTS]
    table = {"copy_cost": spread(ratios), "recovery_s": spread(rec_s), "rows": rows}
    path = write_result("failover_cost", {"settings": vars(args), "overrides": setting, "gpus": args.gpus, **table,
                                          "runs": out}, args.commit)
    print_table(rows, ["variant", "runs", "step_s"])
    print(f"step with copies / without: {table['copy_cost']}; recovery seconds: {table['recovery_s']} -> {path}")


if __name__ == "__main__":
    main()
