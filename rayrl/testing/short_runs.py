"""The short runs that the early-dip test and benchmark share: the arithmetic recipe at 32 x 8 for 40 steps and at
8 x 4 for 60, asynchronous (η = 1) with dynamic sampling, held-out accuracy on 200 problems."""

SETUPS = {"32x8": ["learner.total_steps=40", "rollout.batch_size=32", "rollout.group_size=8"],
          "8x4": ["learner.total_steps=60", "rollout.batch_size=8", "rollout.group_size=4"]}
BASE = ["data.eval_size=200", "rollout.max_staleness=1", "algorithm.dynamic_sampling=true", "metrics.progress=false", "checkpoint.save_final=false", "checkpoint.every_steps=0",
        "scheduler.include_dashboard=false", "checkpoint.resume=never"]


def held_out_rise(summary: dict) -> float:
    """Held-out accuracy after the run minus before, rounded off float noise: a rise of exactly a bar's problems
    must meet it (0.195 + 0.04 > 0.235 in floats, so `after >= before + 0.04` failed a rise of 8 of 200)."""
    return round(summary["eval_accuracy_after"] - summary["eval_accuracy_before"], 9)
