"""On-policy distillation's teacher on one GPU: a Qwen2-1.5B-shaped teacher (random weights) on a vLLM engine of
its own inside the rollout worker's bundle, scoring the samples of a 0.5B-shaped student (vLLM rollout and FSDP2
learner sharing the GPU, η = 0, every completion exactly --tokens long), against the same run without a teacher
(GRPO on the task reward). Reported per repeat: the generation's tokens/s (the run without a teacher: generated
tokens over the wait for a batch), the teacher's scoring tokens/s (the completion tokens it scored over its busy
seconds; the same tokens the student generated), their ratio, the teacher's busy share of the distillation run's
steps, and both runs' step times. Repeats alternate the order. The differences in work: the distillation run
also runs the teacher over every sample (prompt and completion, one forward, no sampling) and its loss takes
the teacher's log-probs instead of group-relative rewards; both runs generate and train the same token counts.

    python -m benchmarks.performance.teacher_gpu --commit SHA [--repeats 1] [--steps 8] [--warmup 3] [--kinds rl]
    python -m benchmarks.performance.teacher_gpu --tiny ...   # CPU smoke run: tiny shapes, vLLM's CPU engine
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

import torch

from benchmarks.common import print_table, spread, window_parser, write_result
from benchmarks.performance.async_vs_sync import gpu_overrides, run_once
from benchmarks.performance.gpu_busy import GpuBusySampler
from rayrl.models.tokenizer import TEXT_CHARS
from rayrl.testing.random_qwen2 import QWEN2_0_5B_SHAPE, QWEN2_1_5B_SHAPE, TINY_SHAPE, save_random_qwen2

# the teacher beside the student's vLLM engine: a tenth of the worker's GPU in Ray's count, 15 % of its memory
TEACHER = ["teacher.engine=vllm", "teacher.placement=rollout", "teacher.gpu_fraction=0.1",
           "teacher.gpu_memory_utilization=0.15", "algorithm.reward_coef=0", "algorithm.distill_coef=1"]


def settings(student: Path, tokens: int, tiny: bool) -> list[str]:
    """Both runs' settings: async_vs_sync's one-GPU setting at η = 0 (vLLM and the FSDP2 learner sharing the GPU),
    or (tiny) a small CPU run on vLLM's engine."""
    if not tiny:  # the student's engine at 0.2 of the memory (0.3 there) leaves the teacher its 0.15 beside the
        # learner's 0.6, in both runs; its KV cache still holds a step's 256 sequences many times over
        return gpu_overrides(1, student, max_new_tokens=tokens) + ["vllm.gpu_memory_utilization=0.2"]
    return ["rollout.engine=vllm", f"model.path={student}", "vllm.enforce_eager=true", "vllm.cpu_kv_cache_gb=0.25",
            "rollout.ignore_eos=true", f"rollout.max_new_tokens={tokens}", "rollout.batch_size=8",
            "rollout.group_size=4", "algorithm.dynamic_sampling=false", "data.eval_size=8", "teacher.cpus=0.5"]


def one_run(kind: str, base: list[str], teacher: Path, args, sampler: GpuBusySampler) -> dict:
    extra = ["teacher.enabled=true", f"teacher.path={teacher}", *TEACHER] if kind == "distill" else []
    run = run_once(None, base + extra, 0, args.steps, args.warmup, f"teacher-gpu-{kind}", sampler)
    keys = ("step_s", "wait_s", "train_s", "sync_s", "step_median_s", "samples_per_s", "gen_tokens_per_s",
            "gpu_busy", "per_step", "teacher_tokens_per_s", "teacher_share", "teacher_engine_calls")
    return {"kind": kind, **{k: run.get(k) for k in keys}}


def main() -> None:
    p = window_parser(__doc__)
    p.add_argument("--tiny", action="store_true", help="tiny shapes on vLLM's CPU engine (a smoke run)")
    p.add_argument("--kinds", default="distill,rl",
                   help="the runs of each repeat: distill, rl or both (one alone, for a device call too short for two: "
                        "its JSON holds the runs, no ratio)")
    args = p.parse_args()
    kinds = args.kinds.split(",")
    if not kinds or set(kinds) - {"distill", "rl"}:
        raise SystemExit(f"--kinds {args.kinds}: give distill, rl or distill,rl")
    root = Path(tempfile.mkdtemp())
    shapes = (TINY_SHAPE, {**TINY_SHAPE, "num_hidden_layers": 3}) if args.tiny else (QWEN2_0_5B_SHAPE, QWEN2_1_5B_SHAPE)
    student = save_random_qwen2(root / "student", chars=TEXT_CHARS, **shapes[0])
    teacher = (save_random_qwen2(root / "teacher", chars=TEXT_CHARS, **shapes[1])  # the same tokenizer: it must match
               if "distill" in kinds else None)
    base = settings(student, args.tokens, args.tiny)
    runs, partial = [], None
    with GpuBusySampler() as sampler:
        for rep in range(args.repeats):
            for kind in (kinds if rep % 2 == 0 else kinds[::-1]):
                runs.append({"repeat": rep, **one_run(kind, base, teacher, args, sampler)})
                print(f"repeat {rep} {kind}: step {runs[-1]['step_s']:.3f} s", flush=True)
                partial = write_result("teacher_gpu-partial", {"settings": base, "runs": runs}, args.commit,
                                       path=partial)
    partial.unlink()
    if len(set(kinds)) == 1:
        path = write_result(f"teacher_gpu-{kinds[0]}", {"settings": base, "runs": runs}, args.commit)
        print(f"{kinds[0]} runs only -> {path}")
        return
    pair = lambda rep, kind: next(r for r in runs if r["repeat"] == rep and r["kind"] == kind)  # noqa: E731
    ratio = [pair(rep, "distill")["teacher_tokens_per_s"] / pair(rep, "rl")["gen_tokens_per_s"]
             for rep in range(args.repeats)]
    step_ratio = [pair(rep, "distill")["step_s"] / pair(rep, "rl")["step_s"] for rep in range(args.repeats)]
    result = {"student": "tiny" if args.tiny else "qwen2-0.5b", "teacher": "tiny" if args.tiny else "qwen2-1.5b",
              "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
              "tokens": args.tokens, "steps": args.steps, "warmup": args.warmup, "settings": base + TEACHER,
              "teacher_over_generation_tokens_per_s": spread(ratio), "distill_over_rl_step_s": spread(step_ratio),
              "teacher_share": spread([r["teacher_share"] for r in runs if r["kind"] == "distill"]),
              "runs": runs}
    path = write_result("teacher_gpu", result, args.commit)
    print_table([{"repeat": rep, "generation_tok_s": round(pair(rep, "rl")["gen_tokens_per_s"]),
                  "teacher_tok_s": round(pair(rep, "distill")["teacher_tokens_per_s"]),
                  "ratio": round(ratio[rep], 2), "teacher_share": round(pair(rep, "distill")["teacher_share"], 3),
                  "step_distill_s": round(pair(rep, "distill")["step_s"], 3), "step_rl_s": round(pair(rep, "rl")["step_s"], 3)}
                 for rep in range(args.repeats)],
                ["repeat", "generation_tok_s", "teacher_tok_s", "ratio", "teacher_share", "step_distill_s", "step_rl_s"])
    print(f"teacher / generation tokens/s: {statistics.median(ratio):.2f} -> {path}")


if __name__ == "__main__":
    main()
