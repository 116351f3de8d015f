"""A recipe's 150-step run, repeated: held-out accuracy before/after and sampled reward of the first and last 25
steps, per run, with median and min-max (the README's learning figures). The default configuration unless --recipe;
--seeds gives run i the sampling and learner seed i (else every run the config's). CI's short learning test is
tests/cpu/test_early_dip.py; this longer run lives here.

    python -m benchmarks.learning.learning_repeats [--runs 5] [--recipe recipes/x.yaml] [--seeds 0,1,2] [key=value ...]
"""

from __future__ import annotations

import json
from pathlib import Path

import ray

from benchmarks.common import benchmark_parser, print_table, spread, write_result
from rayrl.config import load_config
from rayrl.driver import start_ray
from rayrl.placement import PlacementPlan
from rayrl.trainer import train

# the default recipe at 150 steps
STEPS = 150
TEST_RUN = [f"learner.total_steps={STEPS}", "rollout.batch_size=32", "rollout.group_size=8", "data.eval_size=200",
            "rollout.max_staleness=1", "algorithm.dynamic_sampling=true", "metrics.progress=false", "checkpoint.save_final=false", "checkpoint.every_steps=0",
            "scheduler.include_dashboard=false"]
WINDOW = 25  # steps averaged at each end of the run


def reward_ends(run_dir: Path) -> tuple[float, float]:
    steps = [r for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines()) if "step" in r]
    return (sum(s["sampled_reward_mean"] for s in steps[:WINDOW]) / WINDOW,
            sum(s["sampled_reward_mean"] for s in steps[-WINDOW:]) / WINDOW)


def main() -> None:
    p = benchmark_parser(__doc__)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--recipe", default=None, help="a recipe YAML (default: the default configuration)")
    p.add_argument("--seeds", default="", help="comma-separated: run i samples and trains with seed i")
    p.add_argument("overrides", nargs="*")
    args = p.parse_args()
    seeds = [int(x) for x in args.seeds.split(",") if x]
    rows = []
    for i in range(len(seeds) or args.runs):
        seeded = [f"learner.seed={seeds[i]}", f"rollout.seed={seeds[i]}"] if seeds else []
        cfg = load_config(args.recipe, [*TEST_RUN, *args.overrides, *seeded, f"metrics.run_name=learning-repeat-{i}"])
        start_ray(cfg.scheduler, PlacementPlan(cfg).total_cpus)
        s = train(cfg)
        first, last = reward_ends(Path(s["run_dir"]))
        rows.append({"run": i, **({"seed": seeds[i]} if seeds else {}), "eval_before": s["eval_accuracy_before"], "eval_after": s["eval_accuracy_after"],
                     "eval_gain": s["eval_accuracy_after"] - s["eval_accuracy_before"],
                     "reward_first": first, "reward_last": last, "reward_gain": last - first, "wall_s": s["wall_s"]})
        print(rows[-1], flush=True)
    ray.shutdown()
    print_table(rows, list(rows[0]))
    summary = {k: spread([r[k] for r in rows]) for k in ("eval_before", "eval_after", "eval_gain", "reward_gain")}
    path = write_result("learning_repeats", {"recipe": args.recipe, "config": [*TEST_RUN, *args.overrides],
                                             "seeds": seeds, "runs": rows, **summary}, args.commit)
    print(json.dumps(summary, indent=1), "->", path)


if __name__ == "__main__":
    main()
