"""One recipe run recorded as a result: the run's summary plus per-step timings from its metrics.jsonl.

    python -m benchmarks.performance.recipe_run --config recipes/arithmetic_grpo.yaml [key=value ...]     (make demo's run)
    python -m benchmarks.performance.recipe_run --config recipes/gsm8k_grpo.yaml model.path=... data.path=... (GPU)

The README's recipe figures come from the JSON this writes, never from a run's printed output.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from benchmarks.common import benchmark_parser, write_result
from rayrl.config import load_config
from rayrl.trainer import train

PER_STEP = ("reward_mean", "train_s", "sync_s", "wait_s", "step_s", "staleness_max",
            # placement.mode=colocate: the phases' device memory, the sleep and the engine's own weight write
            "mem_generate_gb", "mem_asleep_gb", "mem_train_gb", "mem_sync_gb", "sleep_s", "release_s", "sync_write_s",
            "reward_model_engine_calls", "reward_model_reward_calls", "reward_model_busy_s")  # reward.model


def main() -> None:
    p = benchmark_parser(__doc__)
    p.add_argument("--config", required=True)
    p.add_argument("--name", default=None, help="the result's name (default: recipe_<config stem>)")
    p.add_argument("overrides", nargs="*")
    args = p.parse_args()
    cfg = load_config(args.config, args.overrides)
    summary = train(cfg)
    steps = [r for r in map(json.loads, (Path(summary["run_dir"]) / "metrics.jsonl").read_text().splitlines())
             if "step" in r]
    per_step = {k: [s[k] for s in steps] for k in PER_STEP if all(k in s for s in steps)}
    medians = {f"{k}_median": statistics.median(v) for k, v in per_step.items() if v}
    name = args.name or "recipe_" + Path(args.config).stem
    path = write_result(name, {"config_file": args.config, "overrides": args.overrides, "summary": summary,
                               "per_step": per_step, **medians}, args.commit)
    print(json.dumps({k: summary[k] for k in ("eval_accuracy_before", "eval_accuracy_after", "steps", "wall_s")}),
          "->", path)


if __name__ == "__main__":
    main()
