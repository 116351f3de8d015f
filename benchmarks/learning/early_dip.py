"""Does a short run make the model worse? The arithmetic recipe (32 × 8) for 40 steps and its 8 × 4
variant for 60, on several sampling seeds: held-out greedy accuracy before and after, and per block of
10 steps the sampled reward, the share of groups whose rewards are all equal, response length and the
sampled tokens' negative log-prob (an entropy estimate). Extra key=value pairs go to every run.

    python -m benchmarks.learning.early_dip [--seeds 0 1 2] [--setups 32x8 8x4] [learner.lr=5e-5 ...]
"""

from __future__ import annotations

import json
from pathlib import Path

import ray

from benchmarks.common import benchmark_parser, print_table, write_result
from rayrl.config import load_config
from rayrl.driver import start_ray
from rayrl.testing.short_runs import BASE, SETUPS
from rayrl.trainer import train

BLOCK = 10
SERIES = ("sampled_reward_mean", "reward_mean", "equal_reward_groups", "response_len_mean", "sampled_nll_mean")


def blocks(run_dir: Path) -> dict[str, list[float]]:
    steps = [r for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines()) if "step" in r]
    cut = [steps[i: i + BLOCK] for i in range(0, len(steps), BLOCK)]
    return {k: [round(sum(s[k] for s in b) / len(b), 4) for b in cut] for k in SERIES}


def main() -> None:
    p = benchmark_parser(__doc__)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--setups", nargs="+", choices=sorted(SETUPS), default=list(SETUPS))
    p.add_argument("overrides", nargs="*")
    args = p.parse_args()
    rows = []
    for setup in args.setups:
        extra = SETUPS[setup]
        for seed in args.seeds:
            cfg = load_config("recipes/arithmetic_grpo.yaml", [*BASE, *extra, *args.overrides, f"rollout.seed={seed}",
                                                              f"learner.seed={seed}", f"metrics.run_name=dip-{setup}-{seed}"])
            start_ray(cfg.scheduler, 3)
            s = train(cfg)
            rows.append({"setup": setup, "seed": seed, "eval_before": s["eval_accuracy_before"],
                         "eval_after": s["eval_accuracy_after"],
                         "eval_gain": s["eval_accuracy_after"] - s["eval_accuracy_before"],
                         **{f"{k}_per_{BLOCK}": v for k, v in blocks(Path(s["run_dir"])).items()}})
            print({k: rows[-1][k] for k in ("setup", "seed", "eval_before", "eval_after")}, flush=True)
    ray.shutdown()
    print_table(rows, ["setup", "seed", "eval_before", "eval_after", "eval_gain"])
    path = write_result("early_dip", {"base": BASE, "setups": SETUPS, "overrides": args.overrides, "runs": rows},
                        args.commit)
    print("->", path)


if __name__ == "__main__":
    main()
