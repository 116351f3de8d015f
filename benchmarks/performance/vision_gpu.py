"""Vision-language RL on one GPU: a Qwen2.5-VL-3B-shaped policy (random weights) with vLLM beside the FSDP2
learner (placement.mode=share, weights over CUDA IPC, η = 0), prompts that each carry one rendered picture, against
a text-only run of the same model whose prompts hold as many tokens (each image's tokens replaced by as many
characters) and the same completions (every one exactly --tokens long, EOS ignored). Reported per run: training
tokens/s (prompt + completion tokens of the trained samples over the window after --warmup steps, every step's
time kept), the ratio images / text in the same repeat, and the rollout-learner log-prob gap on the sampled tokens
(in --dtype; mean and max |Δ log p|). Repeats alternate the order. The differences in work: the image runs also run the
vision tower (vLLM once per prompt, the learner once per distinct picture of a micro-batch, frozen: no backward)
and the image processor.

    python -m benchmarks.performance.vision_gpu --commit SHA [--repeats 1] [--steps 8] [--warmup 3] [--image 448]
        [--dtype float32] [--kinds images]   # fp32 on both sides: is the log-prob gap precision or a fault?
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

import torch

from benchmarks.common import print_table, spread, window_parser, write_result
from benchmarks.performance.async_vs_sync import run_once
from benchmarks.performance.gpu_busy import GpuBusySampler
from rayrl.data.visual_arithmetic import render
from rayrl.models.vision import PLACEHOLDER
from rayrl.testing.random_qwen2_vl import save_random_qwen2_5_vl
from rayrl.types import Task

PROMPTS, GROUP = 16, 8
MIN_GIB = 100


def tasks(image: int, count: int, with_images: bool) -> list[Task]:
    """count arithmetic pictures of image x image pixels; or, text-only, prompts of as many tokens: the picture's
    markup (start, one token per merged 28 x 28 patch, end) as that many digits."""
    tokens = (image // 28) ** 2 + 2
    out = []
    for i in range(count):
        a, b = divmod(i, 100)
        if with_images:
            out.append(Task(f"img:{i}", f"{PLACEHOLDER}=", str(a + b), images=(render(a, b, (image, image)),)))
        else:
            out.append(Task(f"txt:{i}", ("".join(str((i + k) % 10) for k in range(tokens))) + "=", str(a + b)))
    return out


def overrides(model: Path, tokens: int, dtype: str = "bfloat16") -> list[str]:
    """Both runs' settings: the 3B shape's learner in bf16 compute over fp32 weights (or fp32 throughout), vLLM
    with CUDA graphs beside it."""
    return ["cluster.n_gpus_per_node=1", "rollout.engine=vllm", f"model.path={model}", f"vllm.dtype={dtype}",
            "vllm.enforce_eager=false", "vllm.max_model_len=1024", "vllm.max_images_per_prompt=1",
            "rollout.ignore_eos=true", f"rollout.max_new_tokens={tokens}", f"rollout.batch_size={PROMPTS}",
            f"rollout.group_size={GROUP}", "rollout.temperature=1.0", "learner.backend=fsdp",
            f"learner.dtype={dtype}", "learner.compile=false", "learner.max_tokens_per_micro_batch=4096",
            "learner.lr=1e-6", "algorithm.beta=0", "algorithm.dynamic_sampling=false", f"sync.dtype={dtype}",
            "placement.mode=share", "sync.transport=ipc", "vllm.gpu_memory_utilization=0.2",
            "learner.gpu_memory_fraction=0.7", "vllm.max_num_seqs=256"]


def one_run(kind: str, settings: list[str], args, sampler: GpuBusySampler) -> dict:
    with_images = kind == "images"
    train = tasks(args.image, 1024, with_images)
    run = run_once(None, settings, 0, args.steps, args.warmup, f"vision-gpu-{kind}", sampler,
                   tasks=(train[16:], train[:16]))
    prompt_tokens = (args.image // 28) ** 2 + 4  # BOS, start, image tokens, end, "=" (the text twin: as many)
    per_sample = prompt_tokens + args.tokens
    return {"kind": kind, "tokens_per_s": run["samples_per_s"] * per_sample, "prompt_tokens": prompt_tokens,
            **{k: run[k] for k in ("samples_per_s", "step_s", "wait_s", "train_s", "sync_s", "step_median_s",
                                   "per_step", "gpu_busy")},
            **{k: run["mismatch"].get(k) for k in ("mismatch_abs_mean", "mismatch_max", "mismatch_tokens")}}


def main() -> None:
    p = window_parser(__doc__)
    p.add_argument("--image", type=int, default=448, help="picture side in pixels (a multiple of 28)")
    p.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16", help="vLLM, learner and sync")
    p.add_argument("--kinds", default="images,text", help="the runs of each repeat: images, text or both")
    args = p.parse_args()
    kinds = args.kinds.split(",")
    if not kinds or set(kinds) - {"images", "text"}:
        raise SystemExit(f"--kinds {args.kinds}: give images, text or images,text")
    if args.image % 28:
        raise SystemExit(f"--image {args.image}: give a multiple of 28 (patch 14 x merge 2)")
    gib = torch.cuda.get_device_properties(0).total_memory / 2**30
    if gib < MIN_GIB:
        raise SystemExit(f"this GPU has {gib:.0f} GiB; the 3B shape's learner beside vLLM needs about {MIN_GIB} "
                         "(fp32 weights, gradients and AdamW state: ~52 GiB at the optimizer step, vLLM ~17 GiB, "
                         "activations): on an 80 GiB H100 its first step ran out of memory")
    model = save_random_qwen2_5_vl(Path(tempfile.mkdtemp()) / "qwen2.5-vl-3b", max_pixels=args.image ** 2,
                                   device="cuda")
    torch.cuda.empty_cache()  # the build's memory back to the GPU before vLLM and the learner size theirs
    settings = overrides(model, args.tokens, args.dtype)
    runs, partial = [], None
    with GpuBusySampler() as sampler:
        for rep in range(args.repeats):
            for kind in (kinds if rep % 2 == 0 else kinds[::-1]):
                runs.append({"repeat": rep, **one_run(kind, settings, args, sampler)})
                print(f"repeat {rep} {kind}: {runs[-1]['tokens_per_s']:.0f} tokens/s", flush=True)
                # each finished run on disk at once: a device call cut at its limit loses only the run in flight
                partial = write_result("vision_gpu-partial", {"settings": settings, "runs": runs}, args.commit,
                                       path=partial)
    partial.unlink()
    both = {"images", "text"} <= set(kinds)
    rate = lambda rep, k: next(r["tokens_per_s"] for r in runs if r["repeat"] == rep and r["kind"] == k)  # noqa: E731
    ratio = [rate(rep, "images") / rate(rep, "text") for rep in range(args.repeats)] if both else []
    rows = [{"kind": k, "tokens_per_s": spread([r["tokens_per_s"] for r in runs if r["kind"] == k]),
             "step_s": spread([r["step_s"] for r in runs if r["kind"] == k]),
             "mismatch_abs_mean": spread([r["mismatch_abs_mean"] for r in runs if r["kind"] == k])}
            for k in ("images", "text") if k in kinds]
    path = write_result("vision_gpu", {"shape": "qwen2.5-vl-3b", "gpu_gib": gib, "image_px": args.image,
                                       "image_tokens": (args.image // 28) ** 2, "tokens": args.tokens,
                                       "dtype": args.dtype,
                                       "prompts": PROMPTS, "group": GROUP, "steps": args.steps, "warmup": args.warmup,
                                       "settings": settings, "images_over_text": spread(ratio),
                                       "rows": rows,
                                       "runs": runs}, args.commit)
    print_table([{k: (f"{v['median']:.4g} [{v['min']:.4g}, {v['max']:.4g}]" if isinstance(v, dict) else v)
                  for k, v in r.items()} for r in rows], ["kind", "tokens_per_s", "step_s", "mismatch_abs_mean"])
    if both:
        print(f"images / text tokens/s: {statistics.median(ratio):.3f} (per repeat {[round(x, 3) for x in ratio]})")
    print(f"-> {path}")


if __name__ == "__main__":
    main()
