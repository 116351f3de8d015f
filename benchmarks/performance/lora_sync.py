"""LoRA against full fine-tuning on the same model, prompts and settings: a weight sync's bytes and time (learner to
the rollout engine, the sync as the run does it) and the learner's step time and peak device memory.

    python -m benchmarks.performance.lora_sync --commit $(git rev-parse --short HEAD)   (GPU: the 1.5B shape, one H200 shared)
    python -m benchmarks.performance.lora_sync --smoke                                  (CPU: the demo model, hf engine)

Each variant builds the run's actors (ActorSystem), generates and scores --steps batches, trains on each and syncs
after it, then times --hot syncs of unchanged weights. Random weights learn nothing; what is compared is cost.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import ray

from benchmarks.common import benchmark_parser, print_table, write_result
from rayrl.config import load_config
from rayrl.data import load_tasks
from rayrl.demo import prepare_models
from rayrl.driver import ActorSystem
from rayrl.testing.random_qwen2 import QWEN2_1_5B_SHAPE, save_random_qwen2
from rayrl.models.tokenizer import TEXT_CHARS

VARIANTS = {"full": ["lora.enabled=false"], "lora": ["lora.enabled=true", "lora.rank=16"],
            # vLLM: the adapters reloaded from a directory at every sync, against lora's in-place write to its slot
            "lora-reload": ["lora.enabled=true", "lora.rank=16", "lora.vllm_sync=reload"]}


def gpu_overrides(model: Path) -> list[str]:
    """One GPU shared by vLLM and an FSDP2 learner in bf16, weights over CUDA IPC (full) or the adapters (LoRA)."""
    return ["cluster.n_gpus_per_node=1", "placement.mode=share", "sync.transport=ipc", "rollout.engine=vllm",
            f"model.path={model}", "vllm.dtype=bfloat16", "vllm.max_model_len=512", "vllm.gpu_memory_utilization=0.3",
            "learner.gpu_memory_fraction=0.6", "learner.backend=fsdp", "learner.dtype=bfloat16",
            "sync.dtype=bfloat16", "rollout.max_new_tokens=128", "rollout.ignore_eos=true"]


def measure(overrides: list[str], steps: int, hot: int, name: str) -> dict:
    cfg = load_config(None, [*overrides, "rollout.batch_size=16", "rollout.group_size=8", "data.eval_size=16",
                             "algorithm.dynamic_sampling=false", "metrics.progress=false",
                             "scheduler.include_dashboard=false"])
    system = ActorSystem(cfg, name, models=prepare_models(cfg))
    try:
        tasks = load_tasks(cfg.data)[0]
        rollout, reward = system.rollouts[0], system.rewards[0]
        train_s, syncs, peak = [], [], 0.0
        for step in range(steps):
            batch = tasks[step * 16: (step + 1) * 16]
            groups = ray.get(rollout.generate_groups.remote(batch, 8, cfg.rollout.temperature))
            t0 = time.perf_counter()
            stats = system.learners.train([[reward.score.remote(g)] for g in groups]).stats
            train_s.append(time.perf_counter() - t0)
            peak = max(peak, stats.get("mem_train_gb", 0.0))
            syncs.append(ray.get(system.broadcaster.sync.remote()).seconds)
        hot_s, writes = [], []
        for _ in range(hot):
            hot_s.append(ray.get(system.broadcaster.sync.remote()).seconds)
            writes.append(ray.get(rollout.sync_report.remote()))  # vLLM: which path wrote the weights, its seconds
        return {"path": writes[-1].get("path"),
                "engine_write_s_median": statistics.median(w.get("seconds", float("nan")) for w in writes),
                "bytes": system.weight_sync["bytes"], "share_of_model": system.weight_sync["share_of_model"],
                "tensors": system.weight_sync["tensors"], "sync_s_median": statistics.median(syncs[1:] or syncs),
                "hot_sync_s_median": statistics.median(hot_s), "train_s_median": statistics.median(train_s[1:] or train_s),
                "mem_train_gb_peak": peak}
    finally:
        system.close()


def main() -> None:
    p = benchmark_parser(__doc__)
    p.add_argument("--smoke", action="store_true", help="CPU: the demo model and the hf engine")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--hot", type=int, default=5)
    p.add_argument("--variants", default="full,lora,lora-reload", help=f"some of {', '.join(VARIANTS)}")
    p.add_argument("overrides", nargs="*")
    args = p.parse_args()
    if args.smoke:
        base = []
    else:
        model = save_random_qwen2(Path(tempfile.mkdtemp()) / "qwen2-1.5b", chars=TEXT_CHARS, **QWEN2_1_5B_SHAPE)
        base = gpu_overrides(model)
    rows = []
    for variant in args.variants.split(","):
        rows.append({"variant": variant, **measure([*base, *VARIANTS[variant], *args.overrides], args.steps,
                                                   args.hot, f"lora-sync-{variant}")})
    ray.shutdown()
    by = {r["variant"]: r for r in rows}
    summary = {}
    if "full" in by and "lora" in by:
        full, lora = by["full"], by["lora"]
        summary = {"sync_bytes_ratio": lora["bytes"] / full["bytes"],
                   "hot_sync_ratio": lora["hot_sync_s_median"] / full["hot_sync_s_median"],
                   "mem_ratio": lora["mem_train_gb_peak"] / full["mem_train_gb_peak"] if full["mem_train_gb_peak"]
                   else None}
    if "lora" in by and "lora-reload" in by:
        summary["in_place_over_reload"] = by["lora"]["hot_sync_s_median"] / by["lora-reload"]["hot_sync_s_median"]
    print_table(rows, list(rows[0]))
    print(summary)
    if not args.smoke:
        print("->", write_result("lora_sync", {"shape": "qwen2-1.5b", "rows": rows, **summary,
                                               "overrides": [*base, *args.overrides]}, args.commit))


if __name__ == "__main__":
    main()
