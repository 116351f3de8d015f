"""Stale rollouts with and without off-policy correction: the arithmetic recipe at η = 4 with plain PPO
against the behaviour policy, with decoupled PPO (masked importance weights, the default), with
truncated importance sampling, and at η = 0, on the same seeds. Held-out accuracy every few steps and
the sampled reward, against step and against training wall time (evaluations left out); one JSON and
one PNG plot (`pip install matplotlib`) in benchmarks/results/. The order of the variants alternates
from seed to seed.

    python -m benchmarks.learning.staleness [--seeds 0 1] [--steps 150] [key=value ...]
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import ray

from benchmarks.common import benchmark_parser, print_table, write_result
from rayrl.config import load_config
from rayrl.driver import start_ray
from rayrl.trainer import train

VARIANTS = {
    "eta4-none": ["rollout.max_staleness=4", "algorithm.off_policy_correction=false"],
    "eta4-decoupled": ["rollout.max_staleness=4"],
    "eta4-tis": ["rollout.max_staleness=4", "algorithm.behav_imp_weight_mode=truncate",
                 "algorithm.behav_imp_weight_cap=2.0"],
    "eta0": ["rollout.max_staleness=0"],
}
BASE = ["data.eval_size=200", "metrics.progress=false", "checkpoint.save_final=false", "checkpoint.every_steps=0",
        "scheduler.include_dashboard=false", "checkpoint.resume=never"]


def curves(run_dir: Path) -> dict[str, list[float]]:
    steps = [r for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines()) if "step" in r]
    evals = [r for r in steps if "eval_accuracy" in r]
    return {"step": [r["step"] for r in steps], "time_s": [round(r["elapsed_s"], 2) for r in steps],
            "sampled_reward": [round(r["sampled_reward_mean"], 4) for r in steps],
            "eval_step": [r["step"] for r in evals], "eval_time_s": [round(r["elapsed_s"], 2) for r in evals],
            "eval_accuracy": [r["eval_accuracy"] for r in evals],
            "correction_frac": [round(r.get("correction_frac", 0.0), 4) for r in steps],
            "staleness_mean": [round(r["staleness_mean"], 3) for r in steps]}


def plot(runs: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    colours = dict(zip(VARIANTS, ("tab:red", "tab:blue", "tab:green", "tab:grey")))
    for r in runs:
        c, lab = r["curves"], f"{r['variant']} seed {r['seed']}"
        style = dict(color=colours[r["variant"]], alpha=0.8, linestyle="-" if r["seed"] % 2 == 0 else "--")
        smooth = [statistics.mean(c["sampled_reward"][max(0, i - 9): i + 1]) for i in range(len(c["step"]))]
        axes[0][0].plot(c["step"], smooth, label=lab, **style)
        axes[0][1].plot(c["time_s"], smooth, **style)
        axes[1][0].plot([0, *c["eval_step"], c["step"][-1]], [r["eval_before"], *c["eval_accuracy"], r["eval_after"]],
                        marker="o", **style)
        axes[1][1].plot([0, *c["eval_time_s"], c["time_s"][-1]], [r["eval_before"], *c["eval_accuracy"], r["eval_after"]],
                        marker="o", **style)
    for ax, (y, x) in zip(axes.flat, [("sampled reward (10-step mean)", "step"), ("sampled reward", "training wall time (s)"),
                                      ("held-out accuracy", "step"), ("held-out accuracy", "training wall time (s)")]):
        ax.set_xlabel(x)
        ax.set_ylabel(y)
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.suptitle("arithmetic recipe: staleness 4 with and without off-policy correction, and staleness 0")
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main() -> None:
    p = benchmark_parser(__doc__)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--eval-every", type=int, default=25)
    p.add_argument("overrides", nargs="*")
    args = p.parse_args()
    runs = []
    for k, seed in enumerate(args.seeds):
        order = list(VARIANTS) if k % 2 == 0 else list(reversed(VARIANTS))
        for variant in order:
            cfg = load_config("recipes/arithmetic_grpo.yaml", [
                *BASE, *VARIANTS[variant], *args.overrides, f"learner.total_steps={args.steps}",
                f"eval.every_steps={args.eval_every}", f"rollout.seed={seed}", f"learner.seed={seed}",
                f"metrics.run_name=staleness-{variant}-{seed}"])
            start_ray(cfg.scheduler, 3)
            s = train(cfg)
            c = curves(Path(s["run_dir"]))
            runs.append({"variant": variant, "seed": seed, "eval_before": s["eval_accuracy_before"],
                         "eval_after": s["eval_accuracy_after"], "reward_last25": statistics.mean(c["sampled_reward"][-25:]),
                         "loop_s": round(s["loop_s"] - s["eval_s"], 1),
                         "staleness_mean": statistics.mean(c["staleness_mean"]), "curves": c})
            print({k: v for k, v in runs[-1].items() if k != "curves"}, flush=True)
    ray.shutdown()
    table = []
    for variant in VARIANTS:
        mine = [r for r in runs if r["variant"] == variant]
        table.append({"variant": variant, **{k: statistics.median(r[k] for r in mine) for k in
                                             ("eval_after", "reward_last25", "loop_s", "staleness_mean")},
                      "eval_after_range": f"{min(r['eval_after'] for r in mine):.3f}-{max(r['eval_after'] for r in mine):.3f}"})
    print_table(table, list(table[0]))
    path = write_result("staleness", {"base": BASE, "variants": VARIANTS, "steps": args.steps, "seeds": args.seeds,
                                      "overrides": args.overrides, "medians": table, "runs": runs}, args.commit)
    plot(runs, path.with_suffix(".png"))
    print("->", path, path.with_suffix(".png"))


if __name__ == "__main__":
    main()
