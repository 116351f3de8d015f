"""Learner throughput and MFU: a Qwen2-1.5B-shaped model (random weights, bf16), GRPO train steps on packed
sequences of mixed lengths, FSDP2 and DeepSpeed side by side, on one GPU or on a group of ranks.

    python -m benchmarks.performance.learner_mfu [--steps 4] [--peak-tflops 989]   (run on the GPU machine)
    python -m benchmarks.performance.learner_mfu --runs fsdp:packed:16384:compile,fsdp:padded:8192  (backend:layout:tokens[:compile])
    python -m benchmarks.performance.learner_mfu --shape 0.5b --runs fsdp:packed:32768:compile:learner.logprob_chunk_tokens=8192
    (a run's further parts are config overrides; --shape 0.5b: the Qwen2-0.5B shape async_vs_sync trains)
    python -m benchmarks.performance.learner_mfu --ranks 1,2 --runs fsdp:packed:16384:compile,zero3:packed:16384
    (each run on 1 rank, then 2: one GPU each, --groups per rank, so every rank trains as many tokens)

FLOPs per step = sum over sequences of 6·N·len + 6·layers·(heads·head_dim)·len² (causal attention,
forward + backward); MFU = FLOPs / step time / (peak · ranks), the mean rank's. Only the training passes are timed: the
proximal-policy pass is off (off_policy_correction=false) and β = 0. gpu_busy: NVML's share of the timed
steps in which a kernel ran (the learner alone: its ceiling when it shares the GPU with generation).
"""

from __future__ import annotations

import random
import tempfile
import time
from pathlib import Path

import ray

from benchmarks.common import benchmark_parser, print_table, write_result
from benchmarks.performance.gpu_busy import GpuBusySampler, cuda_mps
from rayrl.actors import LearnerGroup
from rayrl.config import load_config
from rayrl.testing.random_qwen2 import QWEN2_0_5B_SHAPE, QWEN2_1_5B_SHAPE, save_random_qwen2
from rayrl.placement import PlacementPlan
from rayrl.types import Sample, Task, TrajectoryGroup


SHAPES = {"0.5b": QWEN2_0_5B_SHAPE, "1.5b": QWEN2_1_5B_SHAPE}


def make_groups(n_groups: int, group_size: int, vocab: int, seed: int = 0,
                completion: int | None = None) -> list[TrajectoryGroup]:
    """Mixed lengths (prompts 64-255, completions 128-1791 tokens), or short prompts (16-47) and completions of
    exactly `completion` tokens (async_vs_sync's GPU setting)."""
    rng = random.Random(seed)
    groups = []
    for g in range(n_groups):
        prompt = [rng.randrange(vocab) for _ in range(rng.randrange(*((16, 48) if completion else (64, 256))))]
        samples = []
        for _ in range(group_size):
            n = completion or rng.randrange(128, 1792)
            samples.append(Sample(str(g), prompt, [rng.randrange(vocab) for _ in range(n)], [-1.0] * n, [0] * n,
                                  "length", reward=float(rng.random() < 0.5)))
        groups.append(TrajectoryGroup(Task(str(g), "", "0"), samples))
    return groups


def step_flops(groups: list[TrajectoryGroup], n_params: int, s: dict) -> float:
    attn = s["num_hidden_layers"] * s["num_attention_heads"] * s["head_dim"]
    lengths = [len(x.prompt_ids) + len(x.completion_ids) for g in groups for x in g.samples]
    return sum(6 * n_params * n + 6 * attn * n * n for n in lengths)


BACKENDS = {"fsdp": ["learner.backend=fsdp"], "zero2": ["learner.backend=deepspeed", "learner.zero_stage=2"],
            "zero3": ["learner.backend=deepspeed", "learner.zero_stage=3"]}


def bench(run: str, ranks: int, model_dir: Path, groups, steps: int, peak: float, shape: dict,
          sampler: GpuBusySampler) -> dict:
    """One run on `ranks` ranks (one GPU each) training all of `groups` each step."""
    backend, layout, tokens_per_mb, *rest = run.split(":")
    mode, overrides = [m for m in rest if "=" not in m], [m for m in rest if "=" in m]
    cfg = load_config(None, [f"cluster.n_gpus_per_node={ranks}", f"learner.num_workers={ranks}", "learner.dtype=bfloat16",
                             f"learner.max_tokens_per_micro_batch={tokens_per_mb}",
                             f"learner.pack_sequences={layout == 'packed'}", "algorithm.off_policy_correction=false",
                             f"learner.compile={mode == ['compile']}", f"model.path={model_dir}", *BACKENDS[backend], *overrides])
    name = "-".join([backend, layout, tokens_per_mb, *mode, *(o.split(".")[-1] for o in overrides), f"x{ranks}"])
    plan = PlacementPlan(cfg, name=f"mfu-{name}", learner_only=True)
    plan.create()
    group = LearnerGroup(cfg, str(model_dir), plan)
    items = [[ray.put(g)] for g in groups]
    try:
        group.train(items)  # warm-up: allocator, kernels
        t0, start = time.perf_counter(), time.time()
        stats = [group.train(items).stats for _ in range(steps)]
        step_s, busy = (time.perf_counter() - t0) / steps, sampler.busy(start, time.time())
    finally:
        group.kill()
        plan.remove()
    tokens = sum(len(x.prompt_ids) + len(x.completion_ids) for g in groups for x in g.samples)
    from transformers import AutoConfig

    n_params = count_params(AutoConfig.from_pretrained(model_dir))
    flops = step_flops(groups, n_params, shape)
    return {"backend": name, "run": run, "ranks": ranks, "step_s": step_s, "tokens_per_s": tokens / step_s,
            "tflops": flops / step_s / 1e12, "mfu": flops / step_s / (peak * 1e12 * ranks),
            "micro_batches": stats[-1]["micro_batches"], "loss": stats[-1]["loss"],
            "gpu_busy": sum(busy[:ranks]) / ranks if busy else None}


def count_params(c) -> int:
    """The language model's parameters (a vision-language config: its text model's; the vision tower left out)."""
    tied = getattr(c, "tie_word_embeddings", None)  # a vision-language config holds it at the top
    c = c.get_text_config()
    tied = getattr(c, "tie_word_embeddings", tied)
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    attn = c.hidden_size * head_dim * (c.num_attention_heads * 2 + c.num_key_value_heads * 2) \
        + head_dim * (c.num_attention_heads + 2 * c.num_key_value_heads)
    mlp = 3 * c.hidden_size * c.intermediate_size
    per_layer = attn + mlp + 2 * c.hidden_size
    emb = c.vocab_size * c.hidden_size * (1 if tied else 2)
    return c.num_hidden_layers * per_layer + emb + c.hidden_size


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--groups", type=int, default=16, help="groups per rank and step")
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--peak-tflops", type=float, default=989.0, help="bf16 dense peak of one GPU (H200: 989)")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="1.5b")
    parser.add_argument("--completion", type=int, default=None, help="fixed completion length (default: mixed)")
    parser.add_argument("--runs", default="fsdp:packed:16384,fsdp:packed:16384:compile,zero2:packed:16384:compile",
                        help="comma-separated backend:layout:tokens[:compile] (fsdp or zero2; packed or padded; "
                             "compile sets learner.compile=true)")
    parser.add_argument("--ranks", default="1", help="comma-separated rank counts, each run on each (weak scaling: "
                        "--groups per rank); with more than one, each row's mfu_over_one_rank")
    args = parser.parse_args()
    ranks = [int(r) for r in args.ranks.split(",")]
    shape = SHAPES[args.shape]
    model_dir = save_random_qwen2(Path(tempfile.mkdtemp()) / f"qwen2-{args.shape}", **shape)
    groups = {n: make_groups(args.groups * n, args.group_size, shape["vocab_size"], completion=args.completion)
              for n in ranks}
    ray.init(address="local", num_gpus=max(ranks), include_dashboard=False)
    with GpuBusySampler(period_s=0.05) as sampler:
        rows = [bench(run, n, model_dir, groups[n], args.steps, args.peak_tflops, shape, sampler)
                for run in args.runs.split(",") for n in ranks]
    ray.shutdown()
    for row in rows:  # against the same run on one rank, where it ran
        one = [r for r in rows if r["ranks"] == 1 and r["run"] == row["run"]]
        row["mfu_over_one_rank"] = row["mfu"] / one[0]["mfu"] if one else None
    print_table(rows, ["backend", "ranks", "step_s", "tokens_per_s", "tflops", "mfu", "mfu_over_one_rank",
                       "micro_batches", "loss", "gpu_busy"])
    tokens = sum(len(x.prompt_ids) + len(x.completion_ids) for g in groups[ranks[0]] for x in g.samples) // ranks[0]
    path = write_result("learner_mfu", {"model": f"qwen2-{args.shape}-shape", "completion": args.completion,
                                        "tokens_per_step": tokens, "ranks": ranks,  # tokens: each rank's
                                        "peak_tflops": args.peak_tflops,
                                        "cuda_mps": cuda_mps(), "rows": rows}, args.commit)
    print(f"-> {path}")


if __name__ == "__main__":
    main()
