"""GPU check of vLLM rollout (2 GPUs): a vLLM RolloutWorker and an FSDP2 learner on separate GPUs, weights
moved by vLLM's NCCL weight-transfer engine. After the update vLLM's log-probs must match the learner's
(within 0.02) on a trained, peaked policy, and greedy outputs must change with the weights.

    python tests/gpu/rollout_check.py [--dtypes bfloat16 float32]     (run on the GPU machine)
"""

from __future__ import annotations

import math
import tempfile

import ray

from rayrl.testing.records import benchmark_parser, format_table, write_result
from rayrl.config import load_config
from rayrl.data import load_tasks
from rayrl.demo import prepare_models
from rayrl.driver import ActorSystem


def _diffs(learner_lp, groups) -> list[float]:
    ours = [x for row in learner_lp for x in row]
    theirs = [x for g in groups for s in g.samples for x in s.logprobs]
    assert len(ours) == len(theirs), (len(ours), len(theirs))
    return [abs(a - b) for a, b in zip(ours, theirs)]


GPU = ["cluster.n_gpus_per_node=2", "sync.transport=nccl"]
SMOKE = ["cluster.n_gpus_per_node=0", "sync.transport=gloo", "vllm.cpu_kv_cache_gb=0.25"]  # CPU: checks the script


def check(dtype: str, work: str, placement: list[str]) -> dict:
    cfg = load_config(None, [
        *placement, "rollout.engine=vllm", "learner.backend=fsdp",
        f"learner.dtype={dtype}", f"vllm.dtype={dtype}", "vllm.enforce_eager=true",
        "vllm.gpu_memory_utilization=0.3", "rollout.temperature=1.0", "learner.lr=2e-4",
        "rollout.max_new_tokens=8", f"demo.cache_dir={work}/models", f"metrics.run_dir={work}/runs",
        f"metrics.run_name=check-{dtype}", "metrics.progress=false"])
    t = ActorSystem(cfg, f"check-{dtype}", models=prepare_models(cfg))
    train_tasks, eval_tasks = load_tasks(cfg.data)
    try:
        rollout, learner = t.rollouts[0], t.learners.rank0
        greedy_before = ray.get(rollout.generate_groups.remote(eval_tasks[:64], 1, 0.0))
        groups = ray.get(rollout.generate_groups.remote(train_tasks[:32], 8, 1.0))
        before = _diffs(ray.get(learner.completion_logprobs.remote(groups)), groups)
        refs = [t.rewards[0].score.remote(g) for g in groups]
        for _ in range(3):
            t.learners.train([[r] for r in refs])
        synced = ray.get(t.broadcaster.sync.remote())
        fresh = ray.get(rollout.generate_groups.remote(train_tasks[32:64], 8, 1.0))
        after = _diffs(ray.get(learner.completion_logprobs.remote(fresh)), fresh)
        greedy_after = ray.get(rollout.generate_groups.remote(eval_tasks[:64], 1, 0.0))
        gpus = ray.get(rollout.stats.remote())["gpu_ids"]
    finally:
        t.close()
    changed = sum(a.samples[0].completion_ids != b.samples[0].completion_ids
                  for a, b in zip(greedy_before, greedy_after))
    probs = [math.exp(x) for g in fresh for s in g.samples for x in s.logprobs]
    return {"dtype": dtype, "rollout_gpu": gpus, "versions": [v for g in fresh for s in g.samples for v in s.versions][:1],
            "sync_s": synced.seconds, "sync_mb": synced.n_bytes / 2**20,
            "max_diff_before": max(before), "max_diff_after": max(after),
            "mean_diff_after": sum(after) / len(after), "mean_token_prob": sum(probs) / len(probs),
            "tokens": len(after), "greedy_changed": f"{changed}/{len(greedy_before)}",
            "ok": max(after) <= 0.02 and changed > 0}


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--dtypes", nargs="+", default=["bfloat16", "float32"])
    parser.add_argument("--smoke", action="store_true", help="CPU, gloo: check the script, record nothing")
    args = parser.parse_args()
    work = tempfile.mkdtemp()
    ray.init(address="local", include_dashboard=False, num_cpus=4 if args.smoke else None)
    rows = [check(d, work, SMOKE if args.smoke else GPU) for d in args.dtypes]
    ray.shutdown()
    print(format_table(rows, ["dtype", "rollout_gpu", "sync_s", "sync_mb", "max_diff_before", "max_diff_after",
                       "mean_diff_after", "mean_token_prob", "tokens", "greedy_changed", "ok"]))
    if not args.smoke:
        print(f"-> {write_result('gpu_rollout_check', {'rows': rows}, args.commit)}")


if __name__ == "__main__":
    main()
