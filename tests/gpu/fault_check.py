"""A run that loses a rollout worker and a reward actor on purpose, recorded: how long until the
death was seen and the worker was back at the current weights, and whether the run still finished
with its ledger balanced and no task trained twice.

    python tests/gpu/fault_check.py                                     (CPU, the arithmetic recipe)
    python tests/gpu/fault_check.py --config recipes/gsm8k_grpo.yaml model.path=... data.path=...   (GPU)
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import ray

from rayrl.testing.records import benchmark_parser, write_result
from rayrl.config import load_config
from rayrl.trainer import train


def _steps_done(run: Path) -> int:
    f = run / "metrics.jsonl"
    lines = [json.loads(x) for x in f.read_text().splitlines()] if f.exists() else []
    return max((r["step"] for r in lines if "step" in r), default=0)


def main() -> None:
    p = benchmark_parser(__doc__)
    p.add_argument("--config", default="recipes/arithmetic_grpo.yaml")
    p.add_argument("--kill-rollout-at", type=int, default=2, help="kill rollout-0 once this step is logged")
    p.add_argument("--kill-reward-at", type=int, default=4, help="kill reward-0 once this step is logged")
    p.add_argument("overrides", nargs="*")
    args = p.parse_args()
    cfg = load_config(args.config, ["learner.total_steps=6", "metrics.run_name=fault-check",
                                    "checkpoint.resume=never", *args.overrides])
    gpus = cfg.cluster.n_gpus_per_node
    ray.init(address="local", num_cpus=max(4, os.cpu_count() or 1), num_gpus=gpus or None, include_dashboard=False)
    run_dir = Path(cfg.metrics.run_dir)
    result: dict = {}
    thread = threading.Thread(target=lambda: result.update(summary=train(cfg)), daemon=True)
    thread.start()
    kills = {}
    for step, actor in sorted([(args.kill_rollout_at, "rollout-0"), (args.kill_reward_at, "reward-0")]):
        while thread.is_alive() and _steps_done(run_dir / cfg.metrics.run_name) < step:
            time.sleep(0.05)
        if not thread.is_alive():
            break
        name = next(d.name for d in run_dir.iterdir() if d.name.startswith(cfg.metrics.run_name))
        ray.kill(ray.get_actor(actor, namespace=f"rayrl-{name}"), no_restart=False)
        kills[actor] = {"after_step": step, "at": time.time()}
    thread.join()
    summary = result.get("summary")
    if summary is None:
        raise SystemExit("the run did not finish: see its log")
    trained = [json.loads(x) for x in (Path(summary["run_dir"]) / "trained.jsonl").read_text().splitlines()]
    ids = [t for rec in trained for t in rec["tasks"]]
    g = summary["groups"]
    recovery = summary["rollout_recoveries"]
    out = {
        "kills": kills, "steps": summary["steps"], "rollout_restarts": summary["rollout_restarts"],
        "seen_after_kill_s": [r["seen_at"] - kills["rollout-0"]["at"] for r in recovery],
        "heal_s": [r["heal_s"] for r in recovery], "groups": g,
        "ledger_balances": g["produced"] == g["trained"] + g["unused"] + g["failed"] + g["dropped_stale"] + g["equal_rewards"],
        "tasks_trained_twice": len(ids) - len(set(ids)),
        "mismatch_max": [json.loads(x).get("mismatch_max") for x in
                                   (Path(summary["run_dir"]) / "metrics.jsonl").read_text().splitlines()
                                   if '"step"' in x],
        "config_file": args.config, "overrides": args.overrides,
    }
    path = write_result("fault_check", out, args.commit)
    print(f"| restarts | seen after kill (s) | heal (s) | ledger | twice |\n| {summary['rollout_restarts']} | "
          f"{[round(x, 1) for x in out['seen_after_kill_s']]} | {[round(x, 1) for x in out['heal_s']]} | "
          f"{out['ledger_balances']} | {out['tasks_trained_twice']} |  -> {path}")
    ray.shutdown()


if __name__ == "__main__":
    main()
