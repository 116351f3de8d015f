"""Bitwise on-policy (rollout.bitwise_on_policy) on one GPU, with a Qwen2-1.5B-shaped model (random weights):

1. engine check: vLLM (batch-invariant, rayrl's fixed-order residual norm) generates one prompt alone and
   inside a batch whose first step prefills >= 300 tokens and whose decode runs >= 256 sequences (greedy);
   then samples at temperature 1 from prompts of several lengths (>= 2,000 tokens), which the learner's
   bitwise forward scores in the same process. Reported: max |Δ log p| alone vs batched, learner vs vLLM
   (bitwise and the normal learner forward), and the cosine between the two forwards' gradients.
2. recipe runs: recipes/gsm8k_grpo_1gpu.yaml (colocated, FSDP2 learner, IPC weight sync after every step) in
   the normal mode and in the bitwise mode, same config otherwise, order alternating over --repeats: the
   learner-vs-rollout mismatch of every step, rollout tokens/s and the learner's MFU.

    python -m benchmarks.performance.bitwise [--steps 5] [--repeats 1] [key=value ...]   (overrides for both recipe runs)
"""

from __future__ import annotations

import json
import statistics
import tempfile
from pathlib import Path

import torch

from benchmarks.common import benchmark_parser, merged_commit, print_table, write_result
from rayrl.testing.bitwise_check import engine_check, fixtures, recipe


def report(check: dict, runs: list[dict], commit: str | None, gpu: str, merged: list[str] | None = None) -> None:
    """The cost (bitwise over normal, medians over runs), JSON and two tables."""
    by_mode = {m: [r for r in runs if r["mode"] == m] for m in ("normal", "bitwise")}
    cost = {f"{k}_ratio": statistics.median(b[k] for b in by_mode["bitwise"]) /
            statistics.median(n[k] for n in by_mode["normal"]) for k in ("rollout_tokens_per_s", "learner_mfu")}
    extra = {"merged": merged} if merged else {}
    path = write_result("bitwise", {"engine_check": check, "runs": runs, "cost": cost, "gpu": gpu, **extra}, commit)
    if check:
        print_table([check], ["alone_vs_batched_max", "sampled_tokens", "learner_bitwise_max",
                              "learner_normal_max", "grad_cosine"])
    print_table([{**r, "mismatch_max": max(r["mismatch_max"]), "tokens_min": min(r["mismatch_tokens"])} for r in runs],
                ["mode", "steps", "mismatch_max", "tokens_min", "rollout_tokens_per_s", "learner_mfu", "step_s_median"])
    print(cost, "->", path)


def merge(files: list[str], commit: str | None) -> None:
    """The recipe runs of several result files (one repeat each, in alternating order) as one result."""
    parts = [json.loads(Path(f).read_text()) for f in files]
    if any("warmup_steps" not in r for p in parts for r in p["runs"]):
        raise SystemExit("--merge: every run must leave out its warm-up steps (warmup_steps); older files do not")
    if len({p["gpu"] for p in parts}) != 1:
        raise SystemExit(f"--merge: the files ran on different GPUs: {sorted({p['gpu'] for p in parts})}")
    report({}, [r for p in parts for r in p["runs"]], commit or merged_commit(parts), parts[0]["gpu"],
           [p["commit"] for p in parts])


def main() -> None:
    p = benchmark_parser(__doc__)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--warmup", type=int, default=1, help="first steps of each run left out of its speed")
    p.add_argument("--bitwise-first", action="store_true", help="start with the bitwise run (then alternate)")
    p.add_argument("--skip-engine-check", action="store_true")
    p.add_argument("--merge", nargs="+", help="result JSONs of earlier invocations: their recipe runs as one result")
    p.add_argument("overrides", nargs="*")
    args = p.parse_args()
    if args.merge:
        return merge(args.merge, args.commit)
    root = Path(tempfile.mkdtemp())
    model_dir, data = fixtures(root)
    check = {} if args.skip_engine_check else engine_check(model_dir)
    runs = []
    for i in range(args.repeats):
        for bitwise in ((False, True) if (i % 2 == 0) != args.bitwise_first else (True, False)):
            runs.append(recipe(model_dir, data, root / "runs", bitwise, args.steps, f"r{i}-{bitwise}",
                               tuple(args.overrides), args.warmup))
    report(check, runs, args.commit, torch.cuda.get_device_name())


if __name__ == "__main__":
    main()
