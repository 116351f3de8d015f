"""Weight sync against its physical reference, measured in the same run, with the learner's and vLLM's
log-probs compared after every sync.

--transport ipc (one GPU, placement.mode=colocate): a Qwen2-1.5B-shaped model (3.09 GB in bf16, 338
tensors), an FSDP2 learner and a vLLM rollout worker on one GPU. Each round runs the colocated phases:
vLLM samples (then the learner rescores the tokens: mean |Δ log p| <= 0.01 and mean exp|Δ| <= 1.02 over
>= 500 tokens, the mismatch bar), vLLM sleeps (level 2), the learner takes a step (lr large enough to
move every weight), lets go of its optimizer state, and the sync wakes vLLM and writes the new weights.
vLLM starts from dummy weights, so the first check fails unless the first sync wrote every tensor.
Then hot syncs (vLLM awake, as in the split placement) time the transfer itself, whole and step by step. References: one
device-to-device copy of the same bytes, and the same bytes as 338 separate tensor copies. With one FSDP2 rank the
sync is in place (vLLM reads the learner's parameters and casts them); the summary's in_place says which ran.

    python -m benchmarks.performance.weight_sync --transport ipc [--rounds 4] [--hot 10]
"""

from __future__ import annotations

import random
import statistics
import tempfile
import time
from pathlib import Path

import msgspec
import ray
import torch

from benchmarks.common import benchmark_parser, print_table, write_result
from rayrl.testing.logprob_gap import mismatch
from rayrl.actors import LearnerGroup, RolloutWorker, WeightBroadcaster
from rayrl.config import load_config
from rayrl.testing.random_qwen2 import QWEN2_1_5B_SHAPE, save_random_qwen2
from rayrl.models.tokenizer import TEXT_CHARS
from rayrl.placement import PlacementPlan
from rayrl.types import GenerationRequest, Task, TrajectoryGroup


def copy_reference(plan, repeats: int = 20) -> dict:
    """Median seconds of one device-to-device copy of the plan's bytes, and of the same bytes as one copy per
    tensor (the least any write into separate parameters can take)."""
    sizes = [s.nbytes for b in plan.buckets for s in b]
    src, dst = (torch.empty(sum(sizes), dtype=torch.uint8, device="cuda") for _ in range(2))
    views = lambda t: list(torch.split(t, sizes))  # noqa: E731
    out = {}
    for name, pairs in (("copy_flat_s", [(dst, src)]), ("copy_per_tensor_s", list(zip(views(dst), views(src))))):
        times = []
        for _ in range(repeats):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for d, s in pairs:
                d.copy_(s)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        out[name] = statistics.median(times[2:])
    del src, dst
    torch.cuda.empty_cache()
    return out


def probe(rollout, learners, prompts: list[list[int]], n_tokens: int) -> tuple[dict, list[TrajectoryGroup]]:
    """vLLM samples n_tokens per prompt at temperature 1; the learner rescores them."""
    requests = [GenerationRequest(str(i), p, 1, n_tokens, 1.0, seed=i, ignore_eos=True) for i, p in enumerate(prompts)]
    samples = ray.get(rollout.generate.remote(requests))
    groups = [TrajectoryGroup(Task(s.request_id, "", "0"), [s]) for s in samples]
    learner = learners.completion_logprobs(groups)
    return mismatch(learner, [s.logprobs for s in samples]), groups


def sync_parts(broadcaster, learners, rollout, repeats: int) -> dict:
    """The hot sync's steps one at a time from the driver (each a Ray call; the broadcaster overlaps the first
    two), medians: pausing vLLM, the learner readying its weights (inside its process: the walk over its
    parameters, and the copy into its buckets or, in place, the wait for its device), vLLM reading them (inside
    the rollout actor: the engine RPC, its round trip and the worker's write) and resuming."""
    version = ray.get(broadcaster.current_version.remote())
    times: dict[str, list[float]] = {}
    for _ in range(repeats):
        t0 = time.perf_counter()
        ray.get(rollout.begin_weight_update.remote())
        t1, w1 = time.perf_counter(), time.time()
        meta = ray.get(learners.rank0.send_weights.remote())
        t2, w2 = time.perf_counter(), time.time()
        ray.get(rollout.receive_weights.remote(meta, version))
        t3, w3 = time.perf_counter(), time.time()
        sent, received = ray.get([learners.rank0.send_report.remote(), rollout.sync_report.remote()])
        hops = {"learner_call_to_entry_s": sent["entered_at"] - w1, "learner_exit_to_return_s": w2 - sent["left_at"],
                "rollout_call_to_entry_s": received["entered_at"] - w2,
                "rollout_exit_to_return_s": w3 - received["left_at"]}
        sent = {k: v for k, v in sent.items() if k.endswith("_s")}
        parts = {**hops, "pause_s": t1 - t0, "send_s": t2 - t1, "receive_resume_s": t3 - t2,
                 "write_s": received["seconds"],
                 **{f"learner_{k}": v for k, v in sent.items()},
                 **{f"rollout_{k}": received[k] for k in ("receive_s", "rpc_s", "resume_s") if k in received}}
        for key, value in parts.items():
            times.setdefault(key, []).append(value)
    empty_calls = (("ray_call_learner_s", learners.rank0.send_report), ("ray_call_rollout_s", rollout.sync_report))
    for key, method in empty_calls:
        for _ in range(repeats):  # an empty call's round trip to each actor: Ray's own share of the parts above
            t0 = time.perf_counter()
            ray.get(method.remote())
            times.setdefault(key, []).append(time.perf_counter() - t0)
    return {f"part_{k}_median": statistics.median(v) for k, v in times.items()}


def train_groups(groups: list[TrajectoryGroup], rng: random.Random) -> list:
    """The probe's samples as groups of two with rewards 0 and 1: a step with a gradient everywhere."""
    out = []
    for i in range(0, len(groups) - 1, 2):
        a, b = groups[i].samples[0], groups[i + 1].samples[0]
        first = rng.random() < 0.5
        samples = [msgspec.structs.replace(s, request_id=str(i), reward=float(r), reward_status="ok")
                   for s, r in ((a, first), (b, not first))]
        out.append([ray.put(TrajectoryGroup(Task(str(i), "", "0"), samples))])
    return out


def main() -> None:
    p = benchmark_parser(__doc__)
    p.add_argument("--transport", default="ipc", choices=["ipc"])
    p.add_argument("--rounds", type=int, default=4, help="colocated rounds: sample, sleep, train, sync")
    p.add_argument("--hot", type=int, default=10, help="syncs with vLLM awake, for the transfer's own time")
    p.add_argument("--prompts", type=int, default=64)
    p.add_argument("--tokens", type=int, default=16)
    p.add_argument("overrides", nargs="*")
    args = p.parse_args()
    work = Path(tempfile.mkdtemp())
    model = save_random_qwen2(work / "model", chars=TEXT_CHARS, **QWEN2_1_5B_SHAPE)
    cfg = load_config(None, [
        "cluster.n_gpus_per_node=1", "placement.mode=colocate", "rollout.max_staleness=0", "rollout.engine=vllm",
        f"model.path={model}", "vllm.load_format=dummy", "vllm.dtype=bfloat16", "vllm.enforce_eager=true",
        "vllm.max_model_len=512", "vllm.gpu_memory_utilization=0.3", "rollout.temperature=1.0",
        "learner.backend=fsdp", "learner.dtype=bfloat16", "learner.lr=1e-3", "learner.offload_optimizer=true",
        "algorithm.beta=0", "sync.transport=ipc", "sync.dtype=bfloat16", *args.overrides])
    ray.init(address="local", include_dashboard=False)
    plan = PlacementPlan(cfg, name="weight-sync")
    plan.create()
    rollout = RolloutWorker.options(**plan.actor_options("rollout", 0)).remote(0, cfg, str(model), None, [], 2)
    ray.get(rollout.health.remote())  # vLLM sizes its pools before the learner allocates
    learners = LearnerGroup(cfg, str(model), plan)
    broadcaster = WeightBroadcaster.remote(cfg, learners, [rollout])
    setup = ray.get(broadcaster.setup.remote())
    weight_plan = ray.get(learners.rank0.weight_plan.remote(int(cfg.sync.bucket_mb * 2**20)))
    reference = copy_reference(weight_plan)
    rng = random.Random(0)
    prompts = [[rng.randrange(4, 60) for _ in range(24)] for _ in range(args.prompts)]
    rounds = []
    check, groups = probe(rollout, learners, prompts, args.tokens)  # vLLM's dummy weights: far off
    rounds.append({"round": "before any sync", **check})
    for r in range(args.rounds):
        asleep = ray.get(rollout.sleep.remote())
        stats = learners.train(train_groups(groups, rng)).stats
        learners.release()
        synced = ray.get(broadcaster.sync.remote())
        report = ray.get(rollout.sync_report.remote())
        check, groups = probe(rollout, learners, prompts, args.tokens)
        rounds.append({"round": f"colocated {r + 1}", "publish_s": synced.seconds, "write_s": report.get("seconds"),
                       "path": report.get("path"), "mem_generate_gb": asleep["mem_generate_gb"],
                       "mem_asleep_gb": asleep["mem_asleep_gb"], "mem_train_gb": stats["mem_train_gb"],
                       "mem_sync_gb": report.get("mem_sync_gb"), "loss": stats["loss"], **check})
    hot = []
    for _ in range(args.hot):
        synced = ray.get(broadcaster.sync.remote())
        hot.append({"publish_s": synced.seconds, "write_s": ray.get(rollout.sync_report.remote()).get("seconds")})
    parts = sync_parts(broadcaster, learners, rollout, args.hot)
    in_place = ray.get(learners.rank0.send_report.remote()).get("in_place")
    check, _ = probe(rollout, learners, prompts, args.tokens)
    rounds.append({"round": f"after {args.hot} hot syncs", **check})
    for row in rounds:
        row["ok"] = row["mismatch_tokens"] >= 500 and row["mismatch_abs_mean"] <= 0.01 \
            and row["token_mult_prob_error"] <= 1.02
    publish = [h["publish_s"] for h in hot]
    writes = [h["write_s"] for h in hot if h["write_s"] is not None] or [float("nan")]  # ipc reports it
    summary = {"transport": args.transport, "in_place": in_place, "bytes": setup["bytes"],
               "tensors": setup["tensors"], "buckets": setup["buckets"], **reference,
               "hot_publish_s_median": statistics.median(publish), "hot_publish_s_min": min(publish),
               "hot_publish_s_max": max(publish), "hot_write_s_median": statistics.median(writes),
               "colocated_publish_s_median": statistics.median(r["publish_s"] for r in rounds if "publish_s" in r),
               **parts}
    summary["hot_publish_over_copy"] = summary["hot_publish_s_median"] / reference["copy_flat_s"]
    summary["hot_write_over_copy"] = summary["hot_write_s_median"] / reference["copy_flat_s"]
    summary["goal_15ms_met"] = summary["hot_publish_s_median"] <= 0.015
    print_table(rounds, ["round", "publish_s", "write_s", "path", "mem_generate_gb", "mem_asleep_gb", "mem_train_gb",
                         "mem_sync_gb", "mismatch_tokens", "mismatch_abs_mean", "token_mult_prob_error", "ok"])
    print_table([summary], ["transport", "in_place", "bytes", "tensors", "copy_flat_s", "copy_per_tensor_s",
                            "hot_write_s_median", "hot_publish_s_median", "hot_publish_over_copy",
                            "colocated_publish_s_median"])
    print_table([parts], list(parts))
    path = write_result("weight_sync", {"summary": summary, "rounds": rounds, "hot": hot,
                                        "config": cfg.model_dump(mode="json")}, args.commit)
    print("->", path)
    ray.shutdown()


if __name__ == "__main__":
    main()
