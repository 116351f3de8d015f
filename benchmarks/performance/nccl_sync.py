"""Weight sync across GPUs against a raw NCCL broadcast of the same bytes, measured in the same run.

Two GPUs, placement.mode=split: an FSDP2 learner on one, a vLLM rollout worker on the other, a
Qwen2-1.5B-shaped model (3.09 GB in bf16). vLLM starts from dummy weights; each round the learner takes a
step and the sync writes every tensor over NCCL, then vLLM samples and the learner rescores the tokens (the
mismatch bar: mean |Δ log p| <= 0.01 over >= 500 tokens). Hot syncs (vLLM awake, nothing generating) time the
transfer itself (a collective: its steps cannot be timed one by one from the driver, as weight_sync's IPC ones
are). Reference, after Ray has let go of the GPUs: two plain processes
broadcasting the same bytes from GPU 0 to GPU 1 with torch.distributed over NCCL, as one buffer and as the
sync's buckets.

    python -m benchmarks.performance.nccl_sync --commit SHA [--rounds 2] [--hot 10]
    python -m benchmarks.performance.nccl_sync --tiny   # CPU smoke run: a tiny shape on vLLM's CPU engine, gloo
"""

from __future__ import annotations

import random
import socket
import statistics
import tempfile
import time
from pathlib import Path

import ray
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from benchmarks.common import benchmark_parser, print_table, write_result
from benchmarks.performance.weight_sync import probe, train_groups
from rayrl.actors import LearnerGroup, RolloutWorker, WeightBroadcaster
from rayrl.config import load_config
from rayrl.models.tokenizer import TEXT_CHARS
from rayrl.placement import PlacementPlan
from rayrl.testing.random_qwen2 import QWEN2_1_5B_SHAPE, TINY_SHAPE, save_random_qwen2

GOAL_S, GOAL_OVER_RAW = 0.025, 3.0
GPU = ["cluster.n_gpus_per_node=2", "vllm.dtype=bfloat16", "vllm.gpu_memory_utilization=0.5",
       "learner.dtype=bfloat16", "sync.transport=nccl", "sync.dtype=bfloat16"]
CPU = ["cluster.n_gpus_per_node=0", "vllm.cpu_kv_cache_gb=0.25", "sync.transport=gloo"]


def _broadcast_rank(rank: int, port: int, sizes: list[int], repeats: int, out) -> None:
    """One process of the reference: rank 0 sends from cuda:0, rank 1 receives on cuda:1 (gloo on CPU without
    GPUs: the smoke run)."""
    gpu = torch.cuda.is_available()
    if gpu:
        torch.cuda.set_device(rank)
    dist.init_process_group("nccl" if gpu else "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2)
    flat = torch.empty(sum(sizes), dtype=torch.uint8, device="cuda" if gpu else "cpu")
    buckets = list(torch.split(flat, sizes))
    times: dict[str, list[float]] = {"raw_flat_s": [], "raw_buckets_s": []}
    for _ in range(repeats):
        for key, tensors in (("raw_flat_s", [flat]), ("raw_buckets_s", buckets)):
            dist.barrier()
            if gpu:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            for t in tensors:
                dist.broadcast(t, src=0)
            if gpu:
                torch.cuda.synchronize()
            dist.barrier()  # the receiver has it too
            times[key].append(time.perf_counter() - t0)
    if rank == 0:
        out.put({k: statistics.median(v[2:]) for k, v in times.items()})
    dist.destroy_process_group()


def raw_broadcast(sizes: list[int], repeats: int = 12) -> dict:
    """Median seconds of a NCCL broadcast of sum(sizes) bytes from GPU 0 to GPU 1: one buffer, and one per size."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_broadcast_rank, args=(r, port, sizes, repeats, out)) for r in range(2)]
    for p in procs:
        p.start()
    result = out.get(timeout=600)
    for p in procs:
        p.join()
    return result


def main() -> None:
    p = benchmark_parser(__doc__)
    p.add_argument("--rounds", type=int, default=2, help="rounds of train, sync, sample and rescore")
    p.add_argument("--hot", type=int, default=10, help="syncs with vLLM awake, for the transfer's own time")
    p.add_argument("--prompts", type=int, default=64)
    p.add_argument("--tokens", type=int, default=16)
    p.add_argument("--tiny", action="store_true", help="a tiny shape on vLLM's CPU engine over gloo (a smoke run)")
    p.add_argument("overrides", nargs="*")
    args = p.parse_args()
    if not args.tiny and torch.cuda.device_count() < 2:
        raise SystemExit(f"nccl_sync needs 2 GPUs (this machine has {torch.cuda.device_count()}); --tiny: smoke run")
    shape = TINY_SHAPE if args.tiny else QWEN2_1_5B_SHAPE
    model = save_random_qwen2(Path(tempfile.mkdtemp()) / "model", chars=TEXT_CHARS, **shape)
    cfg = load_config(None, [
        *(CPU if args.tiny else GPU), "placement.mode=split", "rollout.engine=vllm", f"model.path={model}",
        "vllm.load_format=dummy", "vllm.enforce_eager=true", "vllm.max_model_len=512", "rollout.temperature=1.0",
        "learner.backend=fsdp", "learner.lr=1e-3", "algorithm.beta=0", *args.overrides])
    ray.init(address="local", include_dashboard=False, **({"num_cpus": 4} if args.tiny else {}))  # 2 cores: room
    plan = PlacementPlan(cfg, name="nccl-sync")
    plan.create()
    rollout = RolloutWorker.options(**plan.actor_options("rollout", 0)).remote(0, cfg, str(model), None, [], 2)
    ray.get(rollout.health.remote())
    learners = LearnerGroup(cfg, str(model), plan)
    broadcaster = WeightBroadcaster.remote(cfg, learners, [rollout])
    setup = ray.get(broadcaster.setup.remote())
    weight_plan = ray.get(learners.rank0.weight_plan.remote(int(cfg.sync.bucket_mb * 2**20)))
    sizes = [sum(s.nbytes for s in bucket) for bucket in weight_plan.buckets]
    rng = random.Random(0)
    prompts = [[rng.randrange(4, 60) for _ in range(24)] for _ in range(args.prompts)]
    check, groups = probe(rollout, learners, prompts, args.tokens)  # vLLM's dummy weights: far off
    rounds = [{"round": "before any sync", **check}]
    for r in range(args.rounds):
        stats = learners.train(train_groups(groups, rng)).stats
        synced = ray.get(broadcaster.sync.remote())
        check, groups = probe(rollout, learners, prompts, args.tokens)
        rounds.append({"round": f"trained {r + 1}", "publish_s": synced.seconds, "loss": stats["loss"], **check})
    hot = [ray.get(broadcaster.sync.remote()).seconds for _ in range(args.hot)]
    check, _ = probe(rollout, learners, prompts, args.tokens)
    rounds.append({"round": f"after {args.hot} hot syncs", **check})
    ray.shutdown()  # the GPUs free for the reference
    for row in rounds[1:]:
        row["ok"] = row["mismatch_tokens"] >= 500 and row["mismatch_abs_mean"] <= 0.01
    reference = raw_broadcast(sizes)
    summary = {"bytes": setup["bytes"], "tensors": setup["tensors"], "buckets": setup["buckets"], **reference,
               "hot_publish_s_median": statistics.median(hot), "hot_publish_s_min": min(hot),
               "hot_publish_s_max": max(hot), "checks_ok": all(r["ok"] for r in rounds[1:])}
    summary["hot_over_raw_flat"] = summary["hot_publish_s_median"] / reference["raw_flat_s"]
    summary["goal_met"] = summary["hot_publish_s_median"] <= GOAL_S and summary["hot_over_raw_flat"] <= GOAL_OVER_RAW
    print_table(rounds, ["round", "publish_s", "loss", "mismatch_tokens", "mismatch_abs_mean", "ok"])
    print_table([summary], ["bytes", "buckets", "raw_flat_s", "raw_buckets_s", "hot_publish_s_median",
                            "hot_over_raw_flat", "checks_ok", "goal_met"])
    path = write_result("nccl_sync", {"summary": summary, "rounds": rounds, "hot_publish_s": hot,
                                      "config": cfg.model_dump(mode="json")}, args.commit)
    print("->", path)


if __name__ == "__main__":
    main()
