"""Every algorithm.type on the arithmetic recipe (32 x 8) for a few tens of steps, same seeds: held-out
greedy accuracy before and after, the sampled reward of the first and last 10 steps, whether any loss
or gradient norm was not finite, and the type's own gauges at the end (clip fraction, critic).

    python -m benchmarks.learning.algorithm_types [--steps 40] [--seeds 0] [--types grpo ppo ...] [key=value ...]
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import ray

from benchmarks.common import benchmark_parser, print_table, write_result
from rayrl.config import TYPE_DEFAULTS, load_config
from rayrl.driver import start_ray
from rayrl.trainer import train

BASE = ["data.eval_size=200", "metrics.progress=false", "checkpoint.save_final=false", "checkpoint.every_steps=0",
        "scheduler.include_dashboard=false", "checkpoint.resume=never"]
WINDOW = 10


def main() -> None:
    p = benchmark_parser(__doc__)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--types", nargs="+", default=list(TYPE_DEFAULTS))
    p.add_argument("overrides", nargs="*")
    args = p.parse_args()
    rows = []
    for seed in args.seeds:
        for kind in args.types:
            cfg = load_config("recipes/arithmetic_grpo.yaml", [
                *BASE, f"algorithm.type={kind}", *args.overrides, f"learner.total_steps={args.steps}",
                f"rollout.seed={seed}", f"learner.seed={seed}", f"metrics.run_name=algorithm-{kind}-{seed}"])
            start_ray(cfg.scheduler, 3)
            s = train(cfg)
            steps = [r for r in map(json.loads, (Path(s["run_dir"]) / "metrics.jsonl").read_text().splitlines())
                     if "step" in r]
            last = steps[-1]
            rows.append({"type": kind, "seed": seed, "eval_before": s["eval_accuracy_before"],
                         "eval_after": s["eval_accuracy_after"],
                         "eval_gain": s["eval_accuracy_after"] - s["eval_accuracy_before"],
                         "reward_first": statistics.mean(r["sampled_reward_mean"] for r in steps[:WINDOW]),
                         "reward_last": statistics.mean(r["sampled_reward_mean"] for r in steps[-WINDOW:]),
                         "finite": all(math.isfinite(r["loss"]) and math.isfinite(r["grad_norm"]) for r in steps),
                         "clip_frac_last": last.get("clip_frac"), "critic_explained_var_last": last.get("critic_explained_var"),
                         "step_s": s["step_s_mean"]})
            print(rows[-1], flush=True)
    ray.shutdown()
    print_table(rows, ["type", "seed", "eval_before", "eval_after", "eval_gain", "reward_first", "reward_last", "finite",
                       "step_s"])
    path = write_result("algorithm_types", {"base": BASE, "steps": args.steps, "overrides": args.overrides,
                                            "runs": rows}, args.commit)
    print("->", path)


if __name__ == "__main__":
    main()
