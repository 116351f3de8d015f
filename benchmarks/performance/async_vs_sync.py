"""Asynchronous against synchronous RL on one config: η = 0 (synchronous) and each η > 0, repeated with the
order of the η values alternating (0,1,2,4 then 4,2,1,0, ...); medians and spreads over the repeats.

    python -m benchmarks.performance.async_vs_sync [--etas 0,1,2,4] [--repeats 3] [--steps 40] [--gpus N] [key=value ...]
    python -m benchmarks.performance.async_vs_sync --merge A.json B.json   # repeats run as separate commands (time limits):
                                                               # the second with --reverse-first

--gpus 0: the config as given (recipes/arithmetic_grpo.yaml: hf engine, torch learner, on CPU).
--gpus 1 or 2: a Qwen2-0.5B-shaped model (--shape 1.5b: 1.5B) with random weights, vLLM rollout (CUDA graphs),
FSDP2 learner in bf16 (compiled), fixed-length generations (rollout.ignore_eos). One GPU: both sides share it at
once (placement.mode=share, memory split by vllm.gpu_memory_utilization and learner.gpu_memory_fraction, weights
over CUDA IPC; --engines N: N vLLM engines beside the learner, placement.rollouts_per_gpu); two GPUs or more:
placement.mode=split over NCCL, --learner-gpus L learner ranks (default 1) and a vLLM worker on each other GPU,
32 prompts a step per learner rank (weak scaling: 4 + 4 GPUs train 4x the batch of 1 + 1).
Per run, over the steps after --warmup: step time (the window's mean: the throughput a user gets; at η > 0 a
lead the rollout built during the warm-up can carry a short window, so the table shows the window's second half
against its first, 2nd/1st, and the JSON each step), the driver's wait for a batch (generation, rewards, hops),
training + weight sync, each role's busy share of the step, and each GPU's busy fraction (NVML: the share of
its sample period, 1/6 to 1 s by product, in which a kernel ran; too coarse to split a step's phases). Per repeat:
speedup = step time at η = 0 / step time at η, and the ideal (wait + train) / max(wait, train) of that
repeat's η = 0 run, which assumes the two sides never slow each other and generation costs per batch what
it did at η = 0; and the bound step / (train + sync) of that run, the speedup were generation free (at
η > 0 the engine decodes several batches at once, each cheaper, so the ideal can be passed but not this).
One table, JSON and PNG.
"""

from __future__ import annotations

import json
import re
import statistics
import tempfile
import time
from pathlib import Path

import ray
import torch
from transformers import AutoConfig

from benchmarks.common import as_repeats, benchmark_parser, merged_commit, print_table, pyplot, spread, write_result
from benchmarks.performance.gpu_busy import GpuBusySampler, cuda_mps
from benchmarks.performance.learner_mfu import SHAPES, count_params
from rayrl.config import load_config
from rayrl.testing.random_qwen2 import save_random_qwen2
from rayrl.models.tokenizer import TEXT_CHARS
from rayrl.driver import start_ray
from rayrl.trainer import train

CPU_CONFIG = "recipes/arithmetic_grpo.yaml"


# the learner's micro-batches per model shape, each the fastest learner_mfu measured on one H200: 0.5B, the whole
# batch (~34k tokens here) as one, 0.42 s a step against 0.48 s at 24576 and 0.52-0.80 s at 16384
# (learner_mfu-20261204-093805, -000811); 1.5B, 24576 tokens with log-prob chunks as large, 51.5 % MFU
# (learner_mfu-20261203-173043)
# tokens per micro-batch and per log-prob chunk, sized for a 141 GB H200 with the learner capped at 0.6 of it
MICRO_BATCHES = {"0.5b": (49152, 8192), "1.5b": (24576, 24576)}


def micro_batches(shape: str) -> list[str]:
    """The learner's micro-batch for the shape, scaled down in 8,192-token steps on a card with less memory than
    an H200: on an 80 GB H100 the 0.5B shape at 24,576 tokens ran out of its 0.6 (47.5 GiB), so 16,384 there."""
    tokens, chunk = MICRO_BATCHES[shape]
    if torch.cuda.is_available():
        share = torch.cuda.get_device_properties(0).total_memory / 140e9
        if share < 1.0:
            tokens = max(8192, int(tokens * share * 0.75) // 8192 * 8192)
    return [f"learner.max_tokens_per_micro_batch={tokens}", f"learner.logprob_chunk_tokens={min(chunk, tokens)}"]


def gpu_overrides(gpus: int, model: Path, max_new_tokens: int = 128, shape: str = "0.5b",
                  engines: int = 1, learner_gpus: int = 1) -> list[str]:
    """The GPU setting: generation and training of comparable length, nothing that learns (random weights).
    Both sides tuned as a user would tune a synchronous run: vLLM with CUDA graphs, the learner compiled, with
    micro-batches large enough to keep the device fed. engines > 1 (one GPU): that many vLLM engines share the
    GPU beside the learner (placement.rollouts_per_gpu), each with a fixed KV cache (engines starting at once
    would otherwise size theirs from each other's allocations)."""
    common = [f"cluster.n_gpus_per_node={gpus}", "rollout.engine=vllm", f"model.path={model}", "vllm.dtype=bfloat16",
              "vllm.enforce_eager=false", "vllm.max_model_len=512", "rollout.ignore_eos=true",
              f"rollout.max_new_tokens={max_new_tokens}", f"rollout.batch_size={32 * learner_gpus}",
              "rollout.group_size=8",
              "rollout.temperature=1.0", "learner.backend=fsdp", "learner.dtype=bfloat16", "learner.compile=true",
              *micro_batches(shape), "learner.lr=1e-6", "algorithm.beta=0",
              "algorithm.dynamic_sampling=false", "data.eval_size=16", "sync.dtype=bfloat16"]
    if gpus == 1:  # at most 512 sequences decode at once: vLLM's CUDA graphs go up to 512 (above, a decode step runs
        # without them, and a sync's pause waits for such steps); at η = 0 the 256 of a step are all there is
        if engines > 1:  # 4 GB of KV cache each holds 512 sequences of 512 tokens on the 0.5B shape
            return common + ["placement.mode=share", "sync.transport=ipc", f"placement.rollouts_per_gpu={engines}",
                             f"rollout.num_workers={engines}", f"vllm.gpu_memory_utilization={0.3 / engines:.3f}",
                             "vllm.kv_cache_gb=4", "learner.gpu_memory_fraction=0.6", "vllm.max_num_seqs=512"]
        return common + ["placement.mode=share", "sync.transport=ipc", "vllm.gpu_memory_utilization=0.3",
                         "learner.gpu_memory_fraction=0.6", "vllm.max_num_seqs=512"]
    return common + ["placement.mode=split", "sync.transport=nccl", "vllm.gpu_memory_utilization=0.85",
                     f"learner.num_workers={learner_gpus}", f"rollout.num_workers={gpus - learner_gpus}"]


# what a collective that hangs leaves in a rank's log: torch's watchdog, or NCCL's own report
NCCL_TIMEOUT = re.compile(r"collective operation timeout|NCCL (?:error|WARN).*time(?:d out|out)", re.IGNORECASE)


def nccl_timeouts(since: float, logs: Path = Path("/tmp/ray/session_latest/logs")) -> int:
    """Lines of the local Ray session's worker logs written since `since` (time.time()) that report a
    collective timing out."""
    count = 0
    for f in logs.glob("*worker*") if logs.is_dir() else []:
        if f.stat().st_mtime >= since:
            count += sum(bool(NCCL_TIMEOUT.search(line)) for line in f.read_text(errors="replace").splitlines())
    return count


SYNC_PARTS = ("sync_hold_s", "sync_pause_engine_s", "sync_pause_settle_s", "sync_pause_queued_tokens", "sync_write_s")
PARTS = ("gen_tokens_per_s", "learner_tflops", "train_s", "sync_s", "sync_pause_s", *SYNC_PARTS)  # not in older results


def run_once(config: str | None, overrides: list[str], eta: int, steps: int, warmup: int, name: str,
             sampler: GpuBusySampler, tasks=None) -> dict:
    """One run measured over the window after `warmup` steps; tasks: the caller's own (train, held-out) tasks."""
    cfg = load_config(config, [*overrides, f"learner.total_steps={steps}", f"rollout.max_staleness={eta}",
                               "metrics.progress=false", "eval.every_steps=0", "checkpoint.save_final=false", "checkpoint.every_steps=0",
                               f"metrics.run_name={name}", "scheduler.include_dashboard=false"])
    start_ray(cfg.scheduler, 3)
    started = time.time()
    s = train(cfg, tasks)
    recs = [r for r in map(json.loads, (Path(s["run_dir"]) / "metrics.jsonl").read_text().splitlines()) if "step" in r]
    kept = recs[warmup:]
    if len(kept) < 2:
        raise ValueError(f"{steps} steps after {warmup} warm-up leave {len(kept)}: the window needs 2 or more")
    med = lambda key: statistics.median(key(r) for r in kept)  # noqa: E731
    wait, trn = med(lambda r: r["wait_s"]), med(lambda r: r["train_s"] + r["sync_s"])
    start, end = kept[0]["time"] - kept[0]["step_s"], kept[-1]["time"]
    step, busy = (end - start) / len(kept), sampler.busy(start, end)  # the window's mean: a user's throughput
    half = len(kept) // 2  # a lead the rollout built during the warm-up, running out: the second half slows
    # the strong-baseline check (η = 0, GPU): generation tokens/s over the wait (at η > 0 the wait is not the
    # generation's time), the learner's model FLOPs (6·N per token; attention of these short sequences left out)
    # over its training time
    n_params = count_params(AutoConfig.from_pretrained(cfg.model.path)) if cfg.on_gpu else 0
    return {"eta": eta, "step_s": step, "wait_s": wait, "train_sync_s": trn, "train_s": med(lambda r: r["train_s"]),
            "sync_s": med(lambda r: r["sync_s"]), "sync_pause_s": med(lambda r: r["sync_pause_s"]),
            "gen_tokens_per_s": med(lambda r: r["samples"] * cfg.rollout.max_new_tokens / r["wait_s"])
            if cfg.rollout.ignore_eos and eta == 0 else None,
            "learner_tflops": med(lambda r: 6 * n_params * r["sequence_tokens"] / r["train_s"] / 1e12)
            if n_params else None,
            "train_busy": med(lambda r: (r["train_s"] + r["sync_s"]) / r["step_s"]), "gpu_busy": busy,
            "samples_per_s": sum(r["samples"] for r in kept) / (end - start),
            "staleness_mean": statistics.fmean(r["staleness_mean"] for r in kept),
            "step_median_s": med(lambda r: r["step_s"]),
            "halves_step_s": [statistics.fmean(r["step_s"] for r in part) for part in (kept[:half], kept[half:])],
            "per_step": [{"step_s": r["step_s"], "wait_s": r["wait_s"], "train_s": r["train_s"], "sync_s": r["sync_s"],
                          "staleness_mean": r["staleness_mean"], "warmup": i < warmup,
                          "gpu_busy": sampler.busy(r["time"] - r["step_s"], r["time"])} for i, r in enumerate(recs)],
            # the first rollout worker's side of each sync: its hold, vLLM's pause, the wait for its outputs
            **{k: med(lambda r: r[k]) for k in SYNC_PARTS if all(k in r for r in kept)},
            "eval_before": s["eval_accuracy_before"], "eval_after": s["eval_accuracy_after"],
            "mismatch": s["mismatch"], **teacher_parts(kept, end - start),
            # faults a long multi-GPU run may meet: none expected, each counted
            "rollout_restarts": s["rollout_restarts"], "learner_recoveries": len(s["learner_recoveries"]),
            "nccl_timeouts": nccl_timeouts(started) if cfg.on_gpu else 0}


def teacher_parts(kept: list[dict], window_s: float) -> dict:
    """With a distillation teacher: the tokens it scored per second of its busy time, and its busy share of the
    window, over the window's steps."""
    if not all("teacher_busy_s" in r for r in kept):
        return {}
    busy = sum(r["teacher_busy_s"] for r in kept)
    return {"teacher_tokens_per_s": sum(r["teacher_tokens"] for r in kept) / busy if busy else None,
            "teacher_share": busy / window_s, "teacher_engine_calls": sum(r["teacher_engine_calls"] for r in kept)}


def summarize(runs: list[dict], etas: list[int]) -> list[dict]:
    """Per η: medians and [min, max] over repeats; speedup and its share of the ideal, repeat by repeat."""
    by_repeat: dict[int, dict[int, dict]] = {}
    for r in runs:
        by_repeat.setdefault(r["repeat"], {})[r["eta"]] = r
    rows = []
    for eta in etas:  # a repeat cut short (or merged from a run of fewer η values) counts where it has both
        paired = [rep for rep in by_repeat.values() if eta in rep and 0 in rep]
        mine = [rep[eta] for rep in by_repeat.values() if eta in rep]
        speed = [rep[0]["step_s"] / rep[eta]["step_s"] for rep in paired]
        ideal = [(rep[0]["wait_s"] + rep[0]["train_sync_s"]) / max(rep[0]["wait_s"], rep[0]["train_sync_s"])
                 for rep in paired]
        bound = [rep[0]["step_s"] / rep[0]["train_sync_s"] for rep in paired]
        gpu = [r["gpu_busy"] for r in mine if r["gpu_busy"]]
        rows.append({"eta": eta, "repeats": len(mine), "step_s": spread([r["step_s"] for r in mine]),
                     "wait_s": spread([r["wait_s"] for r in mine]), "train_sync_s": spread([r["train_sync_s"] for r in mine]),
                     "speedup": spread(speed), "ideal_speedup": spread(ideal),
                     "of_ideal": spread([s / i for s, i in zip(speed, ideal)]), "train_bound": spread(bound),
                     "of_bound": spread([s / b for s, b in zip(speed, bound)]),
                     "train_busy": spread([r["train_busy"] for r in mine]),
                     "gpu_busy": [statistics.median(g[i] for g in gpu) for i in range(len(gpu[0]))] if gpu else None,
                     "samples_per_s": spread([r["samples_per_s"] for r in mine]),
                     **({"late_slowdown": spread([r["halves_step_s"][1] / r["halves_step_s"][0] for r in mine])}
                        if all("halves_step_s" in r for r in mine) else {}),
                     **{k: spread([r[k] for r in mine]) for k in PARTS if all(r.get(k) is not None for r in mine)},
                     "eval_after": spread([r["eval_after"] for r in mine])})
    return rows


def table_row(row: dict) -> dict:
    show = lambda s: f"{s['median']:.3f} [{s['min']:.3f}, {s['max']:.3f}]"  # noqa: E731
    out = {"eta": row["eta"], **{k: show(row[k]) for k in ("step_s", "wait_s", "train_sync_s", "speedup", "of_ideal")},
           "ideal": f"{row['ideal_speedup']['median']:.3f}", "bound": f"{row['train_bound']['median']:.3f}",
           "of_bound": f"{row['of_bound']['median']:.2f}", "train_busy": f"{row['train_busy']['median']:.2f}", "samples/s": f"{row['samples_per_s']['median']:.0f}"}
    if row["eta"] == 0:  # the baseline itself
        out["speedup"] = out["of_ideal"] = out["of_bound"] = "-"
    out["2nd/1st"] = f"{row['late_slowdown']['median']:.2f}" if "late_slowdown" in row else "-"
    out["gpu_busy"] = ",".join(f"{b:.2f}" for b in row["gpu_busy"]) if row["gpu_busy"] else "-"
    for key, short in (("gen_tokens_per_s", "gen_tok/s"), ("learner_tflops", "learn_TF/s")):
        out[short] = f"{row[key]['median']:.0f}" if key in row else "-"
    parts = [row[k]["median"] for k in ("train_s", "sync_s", "sync_pause_s") if k in row]
    out["train/sync/pause"] = "/".join(f"{p:.2f}" for p in parts) if len(parts) == 3 else "-"
    return out


def plot(rows: list[dict], runs: list[dict], title: str, out: Path) -> Path | None:
    if (plt := pyplot()) is None:
        return None
    etas = [r["eta"] for r in rows]
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.6))
    a.bar([str(e) for e in etas], [r["step_s"]["median"] for r in rows], color="#8cb4d8")
    for i, e in enumerate(etas):
        a.scatter([i] * sum(r["eta"] == e for r in runs), [r["step_s"] for r in runs if r["eta"] == e], color="k", s=10)
    a.set_xlabel("η (max staleness)")
    a.set_ylabel("step time (s): median, each repeat")
    sp = [r["speedup"] for r in rows]
    b.errorbar([str(e) for e in etas], [s["median"] for s in sp], yerr=[[s["median"] - s["min"] for s in sp],
               [s["max"] - s["median"] for s in sp]], marker="o", capsize=3, label="measured")
    b.axhline(rows[0]["ideal_speedup"]["median"], ls="--", color="gray", label="ideal (η = 0 run)")
    b.axhline(rows[0]["train_bound"]["median"], ls=":", color="k", label="bound: generation free")
    b.set_xlabel("η")
    b.set_ylabel("speedup over η = 0")
    b.legend(loc="lower right", fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(out)
    return out


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--config", default=None, help=f"default: {CPU_CONFIG} with --gpus 0, none with GPUs")
    parser.add_argument("--gpus", type=int, default=0, help="0: CPU; 1: one GPU shared; 2 or more: split")
    parser.add_argument("--learner-gpus", type=int, default=1, help="--gpus 2 or more: the learner's ranks")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="0.5b", help="with GPUs: the model's shape")
    parser.add_argument("--engines", type=int, default=1, help="--gpus 1: vLLM engines sharing the GPU")
    parser.add_argument("--etas", default="0,1,2,4")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=3, help="first steps left out of every figure")
    parser.add_argument("--reverse-first", action="store_true", help="the first repeat runs the η values backwards")
    parser.add_argument("--merge", nargs="+", help="result JSONs of earlier invocations: their runs as repeats")
    parser.add_argument("--cuda-mps", choices=["yes", "no"], help="with --merge: whether files that do not record "
                        "it ran under a CUDA MPS daemon")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    if args.merge:
        return merge(args)
    etas = [int(e) for e in args.etas.split(",")]
    if args.gpus >= 2 and not 1 <= args.learner_gpus < args.gpus:
        parser.error(f"--learner-gpus {args.learner_gpus} with --gpus {args.gpus}: give 1 to {args.gpus - 1} "
                     "(the other GPUs each run a vLLM worker)")
    if etas[0] != 0 or args.warmup > args.steps - 2 or args.repeats < 1:
        parser.error("--etas must start with 0 (the synchronous baseline), --steps must leave at least 2 steps "
                     "after --warmup (the window's halves are compared) and --repeats at least 1")
    config, overrides = args.config, list(args.overrides)
    if args.gpus:
        model = save_random_qwen2(Path(tempfile.mkdtemp()) / f"qwen2-{args.shape}", chars=TEXT_CHARS,
                                  **SHAPES[args.shape])
        overrides = gpu_overrides(args.gpus, model, shape=args.shape, engines=args.engines,
                                  learner_gpus=args.learner_gpus) + overrides
    else:
        config = config or CPU_CONFIG
    runs, settings = [], {"gpus": args.gpus, "learner_gpus": args.learner_gpus if args.gpus >= 2 else None,
                          "shape": args.shape if args.gpus else None, "config": config,
                          "overrides": overrides, "steps": args.steps,
                          "warmup": args.warmup, "repeats": args.repeats, "cuda_mps": bool(args.gpus) and cuda_mps()}
    partial = None  # the runs so far, rewritten after each: a time limit cuts the benchmark, not its data
    with GpuBusySampler(period_s=0.05) as sampler:
        for rep in range(args.repeats):
            for eta in (etas if (rep + args.reverse_first) % 2 == 0 else etas[::-1]):
                run = run_once(config, overrides, eta, args.steps, args.warmup, f"async-vs-sync-{rep}-eta{eta}", sampler)
                runs.append({"repeat": rep, **run})
                print(f"repeat {rep} η={eta}: step {run['step_s']:.3f} s", flush=True)
                partial = write_result("async_vs_sync-partial", {**settings, "runs": runs}, args.commit, path=partial)
    ray.shutdown()
    partial.unlink()
    report(etas, runs, settings, args.commit)


def merge(args) -> None:
    """The runs of several result files, as repeats of one benchmark (same settings, η values and steps)."""
    parts = [json.loads(Path(f).read_text()) for f in args.merge]
    for p in parts:  # files written before the benchmark recorded it: as --cuda-mps says (their logs show it)
        p.setdefault("cuda_mps", {"yes": True, "no": False}.get(args.cuda_mps))
    keys = ("gpus", "config", "overrides", "steps", "warmup", "cuda_mps")
    where = ("model.path=", "metrics.run_dir=")  # GPU runs build their model in a fresh temporary directory
    same = lambda p: [p[k] if k != "overrides" else [o for o in p[k] if not o.startswith(where)]  # noqa: E731
                      for k in keys]
    if any(same(p) != same(parts[0]) for p in parts):
        raise SystemExit(f"--merge: the files differ in {keys}; only runs of one setting can be merged")
    runs, offset = as_repeats(parts)
    etas = sorted({r["eta"] for r in runs})
    report(etas, runs, {**{k: parts[0][k] for k in keys}, "repeats": offset, "merged": [p["commit"] for p in parts]},
           args.commit or merged_commit(parts))


def report(etas: list[int], runs: list[dict], settings: dict, commit: str | None) -> None:
    rows = summarize(runs, etas)
    gpus, learners = settings["gpus"], settings.get("learner_gpus") or 1
    setting = {0: "CPU, both sides on its cores", 1: "one GPU shared by vLLM and the learner at once (memory split "
               "by config)"}.get(gpus, f"{gpus} GPUs: {gpus - learners} vLLM worker(s), {learners} learner rank(s)")
    setting += "; CUDA MPS" if settings["cuda_mps"] else ""
    print_table([table_row(r) for r in rows], ["eta", "step_s", "wait_s", "train_sync_s", "speedup", "ideal", "of_ideal",
                                               "bound", "of_bound", "train_busy", "2nd/1st", "gpu_busy", "samples/s",
                                               "gen_tok/s", "learn_TF/s", "train/sync/pause"])
    path = write_result("async_vs_sync", {"setting": setting, **settings, "rows": rows, "runs": runs}, commit)
    png = plot(rows, runs, f"{setting}; {settings['repeats']} repeats, {settings['steps'] - settings['warmup']} steps each",
               path.with_suffix(".png"))
    for r in runs:  # a window that slows down (or speeds up) as it goes was not a steady state
        first, second = r.get("halves_step_s", (1.0, 1.0))
        if not 0.8 <= second / first <= 1.25:
            print(f"repeat {r['repeat']} η={r['eta']}: the window's second half ran {second / first:.2f}x the first's "
                  "step time: not a steady state; raise --steps and --warmup")
    best = max(rows[1:], key=lambda r: r["speedup"]["median"]) if len(rows) > 1 else rows[0]
    print(f"{setting}: best η={best['eta']} speedup {best['speedup']['median']:.2f}x, "
          f"{best['of_ideal']['median']:.2f} of the ideal {best['ideal_speedup']['median']:.2f}x, "
          f"{best['of_bound']['median']:.2f} of the bound {best['train_bound']['median']:.2f}x -> {path}, {png}")


if __name__ == "__main__":
    main()
