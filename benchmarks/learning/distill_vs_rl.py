"""On-policy distillation against RL from the same start, on CPU: the GRPO recipe (recipes/arithmetic_grpo.yaml)
for --rl-steps and the distillation recipe (recipes/arithmetic_distill.yaml, its teacher the same recipe after
300 GRPO steps, built once and cached) for --distill-steps, per seed, the order alternating. Held-out greedy
accuracy (200 problems) every --eval-every steps on both sides. The target is fixed: the GRPO runs' median final
accuracy; reported per distillation run, the first evaluated step at or above it; the median of those over seeds
is the result (the issue's bar: <= 50). Also each side's step time, and the teacher's share of a distillation step
(teacher busy seconds over step seconds). One JSON and one PNG (accuracy against step, every run).

    python -m benchmarks.learning.distill_vs_rl [--seeds 0,1,2] [--rl-steps 150] [--distill-steps 50] [--eval-every 10]
"""

from __future__ import annotations

import importlib.util
import json
import statistics
from pathlib import Path

from benchmarks.common import benchmark_parser, print_table, pyplot, spread, write_result
from rayrl.config import load_config
from rayrl.trainer import train

RECIPES = Path(__file__).resolve().parents[2] / "recipes"
COMMON = ["metrics.progress=false", "checkpoint.save_final=false", "checkpoint.every_steps=0",
          "checkpoint.resume=never", "scheduler.include_dashboard=false"]


def _distill_recipe():
    spec = importlib.util.spec_from_file_location("arithmetic_distill", RECIPES / "arithmetic_distill.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(method: str, seed: int, steps: int, eval_every: int, extra: list[str]) -> dict:
    overrides = [*COMMON, f"learner.total_steps={steps}", f"eval.every_steps={eval_every}", f"rollout.seed={seed}",
                 f"learner.seed={seed}", f"metrics.run_name={method}-{seed}", *extra]
    if method == "rl":
        cfg = load_config(RECIPES / "arithmetic_grpo.yaml", overrides)
    else:
        cfg = _distill_recipe().distill_config(str(RECIPES / "arithmetic_distill.yaml"), overrides)
    summary = train(cfg)
    records = [json.loads(x) for x in (Path(summary["run_dir"]) / "metrics.jsonl").read_text().splitlines()]
    steps_ = [r for r in records if "step" in r]
    curve = [(0, summary["eval_accuracy_before"])] + [(r["step"], r["eval_accuracy"]) for r in steps_
                                                      if "eval_accuracy" in r] + [(steps, summary["eval_accuracy_after"])]
    teacher_s = sum(r.get("teacher_busy_s", 0.0) for r in steps_)
    return {"method": method, "seed": seed, "steps": steps, "curve": curve, "final": summary["eval_accuracy_after"],
            "step_s": statistics.median(r["step_s"] for r in steps_),
            "teacher_share": teacher_s / sum(r["step_s"] for r in steps_) if method == "distill" else None,
            "reverse_kl": [r.get("distill_reverse_kl") for r in steps_] if method == "distill" else None,
            "teacher": str(cfg.teacher.path) if cfg.teacher.enabled else None}


def first_at(curve: list, target: float) -> int | None:
    return next((step for step, acc in curve if acc >= target), None)


def plot(runs: list[dict], target: float, out: Path) -> Path | None:
    plt = pyplot()
    if plt is None:
        return None
    fig, ax = plt.subplots(figsize=(7, 4))
    for r in runs:
        steps, acc = zip(*r["curve"])
        ax.plot(steps, acc, color="tab:blue" if r["method"] == "distill" else "tab:orange", alpha=0.7,
                label=f"{r['method']} seed {r['seed']}")
    ax.axhline(target, color="gray", linestyle="--", label=f"target {target:.3f}")
    ax.set_xlabel("training step")
    ax.set_ylabel("held-out greedy accuracy")
    ax.legend(fontsize=7)
    fig.savefig(out, dpi=120, bbox_inches="tight")
    return out


def main() -> None:
    p = benchmark_parser(__doc__)
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--rl-steps", type=int, default=150)
    p.add_argument("--distill-steps", type=int, default=50)
    p.add_argument("--eval-every", type=int, default=10)
    p.add_argument("--distill-eval-every", type=int, default=5)
    p.add_argument("overrides", nargs="*", help="key=value for both methods")
    args = p.parse_args()
    runs = []
    for i, seed in enumerate(int(s) for s in args.seeds.split(",")):
        for method in (("rl", "distill") if i % 2 == 0 else ("distill", "rl")):
            steps, every = (args.rl_steps, args.eval_every) if method == "rl" else (args.distill_steps,
                                                                                    args.distill_eval_every)
            runs.append(run(method, seed, steps, every, list(args.overrides)))
            print({k: v for k, v in runs[-1].items() if k not in ("curve", "reverse_kl")}, flush=True)
    target = statistics.median(r["final"] for r in runs if r["method"] == "rl")
    reach = [first_at(r["curve"], target) for r in runs if r["method"] == "distill"]
    median = statistics.median(s if s is not None else float("inf") for s in reach)
    result = {"target": target, "distill_steps_to_target": reach,
              "median_steps_to_target": None if median == float("inf") else median,  # None: most never reached it
              "rl_final": spread([r["final"] for r in runs if r["method"] == "rl"]),
              "distill_final": spread([r["final"] for r in runs if r["method"] == "distill"]),
              "rl_step_s": spread([r["step_s"] for r in runs if r["method"] == "rl"]),
              "distill_step_s": spread([r["step_s"] for r in runs if r["method"] == "distill"]),
              "teacher_share": spread([r["teacher_share"] for r in runs if r["method"] == "distill"])}
    path = write_result("distill_vs_rl", {**result, "args": vars(args), "runs": runs}, args.commit)
    png = plot(runs, target, path.with_suffix(".png"))
    print_table([{k: v for k, v in r.items() if k in ("method", "seed", "steps", "final", "step_s", "teacher_share")}
                 for r in runs], ["method", "seed", "steps", "final", "step_s", "teacher_share"])
    print(json.dumps(result, indent=1), "->", path, png)


if __name__ == "__main__":
    main()
