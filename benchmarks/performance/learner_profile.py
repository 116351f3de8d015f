"""Where one learner step's GPU time goes: FSDP2 on one GPU, a learner_mfu model and batch (1.5B and mixed
lengths, or --shape 0.5b --completion 128 --groups 32: async_vs_sync's GPU batch), one step under
torch.profiler, CUDA kernel time summed into matmul / attention / log-prob head / elementwise+norm /
optimizer / other, plus the busiest kernels.

    python -m benchmarks.performance.learner_profile [--tokens 16384] [--packed true] [--compile false] [--bitwise]
                                         [--shape 1.5b] [--groups 16] [--completion N] [key=value ...]
                                         (run on the GPU machine)

--bitwise profiles the bitwise on-policy mode's learner (vLLM's batch-invariant kernels in this process, so run
it in its own process); key=value overrides either, e.g. the bitwise benchmark's recipe settings. Host syncs
(`aten::_local_scalar_dense`, a device value read on the host) are counted: each one drains the device's queue.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist

from benchmarks.common import benchmark_parser, print_table, write_result
from benchmarks.performance.learner_mfu import SHAPES, make_groups
from rayrl.batching import collate
from rayrl.config import load_config
from rayrl import components
from rayrl.testing.random_qwen2 import save_random_qwen2
from rayrl.rendezvous import free_port

# kernel-name fragments per category, first match wins
BITWISE = ["rollout.engine=vllm", "rollout.bitwise_on_policy=true", "vllm.dtype=bfloat16", "learner.compile=false"]
CATEGORIES = [("attention", ("flash",)), ("optimizer", ("adam", "foreach", "multi_tensor")),
              ("batch-invariant triton", ("batch_invariant", "_rms_norm", "log_softmax_kernel", "mean_kernel",
                                          "persistent", "_compute_token_logprobs", "temperature")),
              ("matmul", ("gemm", "cutlass", "sm90_xmma", "nvjet", "cublas")),
              ("log-softmax / exp", ("logsumexp", "softmax", "exp_kernel")),
              ("norm / elementwise / copy", ("elementwise", "reduce", "copy", "cat", "index", "scatter", "gather",
                                             "fill", "rsqrt", "pow", "mean", "mul", "add", "silu"))]


def category(name: str) -> str:
    low = name.lower()
    return next((c for c, keys in CATEGORIES if any(k in low for k in keys)), "other")


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--tokens", type=int, default=16384)
    parser.add_argument("--packed", default="true")
    parser.add_argument("--compile", default="false", help="learner.compile")
    parser.add_argument("--bitwise", action="store_true", help="rollout.bitwise_on_policy=true")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="1.5b")
    parser.add_argument("--groups", type=int, default=16, help="groups of 8 samples in the batch")
    parser.add_argument("--completion", type=int, default=None, help="fixed completion length (default: mixed)")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{free_port('127.0.0.1')}", rank=0, world_size=1)
    torch.cuda.set_device(0)
    shape, model_name = SHAPES[args.shape], f"qwen2-{args.shape}-shape"
    model_dir = save_random_qwen2(Path(tempfile.mkdtemp()) / model_name, **shape)
    cfg = load_config(None, ["cluster.n_gpus_per_node=1", "learner.backend=fsdp", "learner.dtype=bfloat16",
                             f"learner.max_tokens_per_micro_batch={args.tokens}", f"learner.pack_sequences={args.packed}",
                             f"learner.compile={args.compile}",
                             "algorithm.off_policy_correction=false", f"model.path={model_dir}",
                             *(BITWISE if args.bitwise else []), *args.overrides])
    learner = components.learner(cfg, str(model_dir))
    groups = make_groups(args.groups, 8, shape["vocab_size"], completion=args.completion)
    batch = collate(groups, learner.tokenizer.pad_token_id)
    learner.train_step(batch)  # warm-up
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    activities = [torch.profiler.ProfilerActivity.CUDA, torch.profiler.ProfilerActivity.CPU]
    with torch.profiler.profile(activities=activities) as prof:
        stats = learner.train_step(batch)
        torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    events = prof.key_averages()
    kernels = [(e.key, e.self_device_time_total / 1e6) for e in events if e.self_device_time_total > 0
               and e.device_type == torch.autograd.DeviceType.CUDA]
    host_syncs = sum(e.count for e in events if e.key == "aten::_local_scalar_dense")
    busy = sum(t for _, t in kernels)
    sums: dict[str, float] = {}
    for name, t in kernels:
        sums[category(name)] = sums.get(category(name), 0.0) + t
    # shares of kernel time; the idle row's share is of the profiled wall time
    rows = [{"category": c, "gpu_s": t, "share": t / busy} for c, t in sorted(sums.items(), key=lambda x: -x[1])]
    idle = max(0.0, wall - busy)
    rows.append({"category": "idle (share of wall time)", "gpu_s": idle, "share": idle / wall})
    top = [{"kernel": n[:90], "gpu_s": t} for n, t in sorted(kernels, key=lambda x: -x[1])[:12]]
    print_table(top, ["kernel", "gpu_s"])
    print_table(rows, ["category", "gpu_s", "share"])
    print(f"profiled step: wall {wall:.2f} s (profiler on), kernels {busy:.2f} s, micro-batches {stats['micro_batches']}, "
          f"host syncs {host_syncs}")
    path = write_result("learner_profile", {"model": model_name, "groups": args.groups, "completion": args.completion,
                                            "tokens_per_micro_batch": args.tokens,
                                            "packed": args.packed, "compile": args.compile, "bitwise": args.bitwise,
                                            "overrides": args.overrides, "host_syncs": host_syncs,
                                            "wall_s": wall, "kernel_s": busy,
                                            "categories": rows, "top_kernels": top}, args.commit)
    print(f"-> {path}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
