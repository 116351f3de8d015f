"""Same config, η = 0 (synchronous) and η = 2 (asynchronous), one Ray cluster, side by side.

    python benchmarks/async_vs_sync.py [--steps 60] [key=value ...]

Prints, per step: engine generation time, the driver's wait for a batch (generation + reward + actor
hops), training + weight sync, step time, control time (step - generation - training + sync: actor
round trips, rewards, feeding prompts), the measured speedup, and the ideal (gen + train) / max(gen,
train) that perfect overlap would give, taken from the synchronous run's wait and train+sync times.
Writes JSON to benchmarks/results/.
"""

from __future__ import annotations


import ray

from benchmarks.common import benchmark_parser, print_table, write_result
from rayrl.config import load_config
from rayrl.trainer import start_ray, train


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--config", default="recipes/arithmetic_grpo.yaml")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    rows = []
    for eta in (0, 2):
        cfg = load_config(args.config, [*args.overrides, f"learner.total_steps={args.steps}",
                                        f"rollout.max_staleness={eta}", "metrics.progress=false",
                                        "checkpoint.save_final=false", f"metrics.run_name=bench-eta{eta}",
                                        "scheduler.include_dashboard=false"])
        start_ray(cfg, 3)
        s = train(cfg)
        # rollout side as the driver sees it: waiting for a batch (engine time + reward + actor hops)
        wait, trn = s["wait_s_per_step"], s["train_s_per_step"] + s["sync_s_per_step"]
        rows.append({"eta": eta, "engine_gen_s": s["generation_s_per_step"], "wait_s": wait, "train_sync_s": trn,
                     "step_s": s["step_s_mean"], "control_s": s["step_s_mean"] - s["generation_s_per_step"] - trn,
                     "ideal_speedup": (wait + trn) / max(wait, trn),
                     "samples_per_s": s["samples"] / s["loop_s"],
                     "eval_before": s["eval_accuracy_before"], "eval_after": s["eval_accuracy_after"]})
    ray.shutdown()
    for r in rows:
        r["speedup"] = rows[0]["step_s"] / r["step_s"]
    print_table(rows, ["eta", "engine_gen_s", "wait_s", "train_sync_s", "step_s", "control_s", "speedup", "ideal_speedup", "samples_per_s",
                       "eval_before", "eval_after"])
    sync, asyn = rows
    path = write_result("async_vs_sync", {"steps": args.steps, "overrides": args.overrides, "runs": rows,
                                          "speedup": asyn["speedup"], "ideal_speedup": sync["ideal_speedup"]}, args.commit)
    print(f"measured speedup {asyn['speedup']:.2f}x of ideal {sync['ideal_speedup']:.2f}x -> {path}")


if __name__ == "__main__":
    main()
