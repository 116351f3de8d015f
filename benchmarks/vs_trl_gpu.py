"""rayrl against TRL's GRPOTrainer on one GPU, throughput at equal work (random weights learn nothing):
a Qwen2-0.5B-shaped model, the same char tokenizer and arithmetic prompts, 32 prompts x 8 samples a step,
every completion exactly --tokens long (EOS ignored on both sides), lr 1e-6, no KL, bf16 compute over fp32
weights; TRL trains 64 samples (about 17k tokens) a micro-batch, rayrl packs up to 48k tokens.

TRL runs as its users run it on one GPU: vLLM in colocate mode (benchmarks.trl_gpu, in a child process).
rayrl runs placement.mode=share (vLLM and the FSDP2 learner on the GPU at once, weights over CUDA IPC) at
each η of --etas: η = 0 is its synchronous baseline (CUDA graphs, compiled learner), larger η overlap
generation with training. Repeats alternate the order of the systems. Reported per system: training
samples/s, step time and the GPU's busy fraction (NVML), medians and ranges over repeats, and each rayrl
η's samples/s over TRL's in the same repeat.

    python -m benchmarks.vs_trl --gpus 1 [--steps 8] [--warmup 2] [--repeats 2] [--etas 0,4] [--tokens 256]
    python -m benchmarks.vs_trl --gpus 1 --reverse-first ...    # a repeat run as its own command, order reversed
    python -m benchmarks.vs_trl --gpus 1 --merge A.json B.json  # such runs as the repeats of one result
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from benchmarks.async_vs_sync import gpu_overrides, run_once
from benchmarks.common import as_repeats, merged_commit, outside_ray_env, print_table, pyplot, spread, write_result
from benchmarks.gpu_busy import GpuBusySampler, cuda_mps
from benchmarks.trl_gpu import MARKER
from rayrl.models.random_qwen2 import QWEN2_0_5B_SHAPE, save_random_qwen2
from rayrl.models.tokenizer import TEXT_CHARS

PROMPTS, GROUP, LR = 32, 8, 1e-6


def run_trl(model: Path, settings: dict, warmup: int, sampler: GpuBusySampler, timeout_s: float) -> dict:
    """TRL in a child process without Ray's environment; its step ends give step time and the busy window."""
    proc = subprocess.run([sys.executable, "-m", "benchmarks.trl_gpu", str(model), json.dumps(settings)],
                          capture_output=True, text=True, timeout=timeout_s, env=outside_ray_env())
    line = next((x for x in proc.stdout.splitlines() if x.startswith(MARKER)), None)
    if line is None:
        first = proc.stderr.find("Traceback")
        raise RuntimeError(f"TRL's run failed (rc {proc.returncode}):\n{proc.stderr[max(0, first):][:3000]}\n...\n"
                           f"{proc.stderr[-3000:]}")
    out = json.loads(line[len(MARKER):])
    ends = out["step_ends"]
    steps = [b - a for a, b in zip(ends, ends[1:])][warmup:]
    step_s = statistics.median(steps)
    busy = sampler.busy(ends[warmup], ends[-1])
    return {"step_s": step_s, "samples_per_s": out["samples_per_step"] / step_s, "gpu_busy": busy[0] if busy else None,
            "steps_s": steps, "gradient_accumulation_steps": out["gradient_accumulation_steps"]}


def run_rayrl(model: Path, eta: int, args, overrides: list[str], name: str, sampler: GpuBusySampler) -> dict:
    run = run_once(None, gpu_overrides(1, model, args.tokens) + overrides, eta, args.steps, args.warmup, name, sampler)
    return {"step_s": run["step_s"], "samples_per_s": run["samples_per_s"],
            "gpu_busy": run["gpu_busy"][0] if run["gpu_busy"] else None, "wait_s": run["wait_s"],
            "train_sync_s": run["train_sync_s"]}


def main(args, overrides: list[str]) -> None:
    import ray

    etas = [int(e) for e in args.etas.split(",")]
    model = save_random_qwen2(Path(tempfile.mkdtemp()) / "qwen2-0.5b", chars=TEXT_CHARS, dtype=torch.float32,
                              **QWEN2_0_5B_SHAPE)
    trl_settings = {"steps": args.steps, "prompts": PROMPTS, "group_size": GROUP, "max_new_tokens": args.tokens,
                    "micro_batch": args.trl_micro_batch, "memory_share": 0.3, "lr": LR, "max_model_len": 512}
    systems = ["trl", *(f"rayrl-eta{e}" for e in etas)]
    settings = {"gpus": 1, "steps": args.steps, "warmup": args.warmup, "repeats": args.repeats, "tokens": args.tokens,
                "cuda_mps": cuda_mps(), "trl": trl_settings,
                "rayrl_overrides": [o for o in gpu_overrides(1, model, args.tokens) + overrides
                                    if not o.startswith("model.path=")]}
    runs, partial = [], None
    with GpuBusySampler() as sampler:
        for rep in range(args.repeats):
            for system in (systems if (rep + args.reverse_first) % 2 == 0 else systems[::-1]):
                if system == "trl":
                    try:
                        run = run_trl(model, trl_settings, args.warmup, sampler, args.trl_timeout)
                    except (RuntimeError, subprocess.TimeoutExpired) as err:  # reported, and rayrl still measured
                        print(f"repeat {rep} trl failed: {err}", flush=True)
                        runs.append({"repeat": rep, "system": system, "error": str(err)})
                        continue
                else:
                    eta = int(system.removeprefix("rayrl-eta"))
                    run = run_rayrl(model, eta, args, overrides, f"vs-trl-gpu-{rep}-eta{eta}", sampler)
                runs.append({"repeat": rep, "system": system, **run})
                print(f"repeat {rep} {system}: {run['samples_per_s']:.1f} samples/s, step {run['step_s']:.3f} s",
                      flush=True)
                partial = write_result("vs_trl_gpu-partial", {**settings, "runs": runs}, args.commit, path=partial)
    if ray.is_initialized():
        ray.shutdown()
    partial.unlink()
    report(systems, runs, settings, args.commit)


def merge(files: list[str], commit: str | None) -> Path:
    """The runs of several result files (same settings) as the repeats of one result."""
    parts = [json.loads(Path(f).read_text()) for f in files]
    for p in parts:  # written before the benchmark recorded it: run_gpu_checks.sh's vs-trl started no MPS daemon then
        p.setdefault("cuda_mps", False)
    keys = ("steps", "warmup", "tokens", "cuda_mps", "trl", "rayrl_overrides")
    if any([p[k] for k in keys] != [parts[0][k] for k in keys] for p in parts):
        raise SystemExit(f"--merge: the files differ in {keys}; only runs of one setting can be merged")
    runs, offset = as_repeats(parts)
    systems = list(dict.fromkeys(r["system"] for r in sorted(runs, key=lambda r: r["system"] != "trl")))
    settings = {**{k: parts[0][k] for k in ("gpus", *keys)}, "repeats": offset, "merged": [p["commit"] for p in parts],
                "merged_files": [Path(f).name for f in files], "measured_on": parts[0]["machine"]}
    return report(systems, runs, settings, commit or merged_commit(parts))


def report(systems: list[str], runs: list[dict], settings: dict, commit: str | None) -> Path:
    trl_by_rep = {r["repeat"]: r for r in runs if r["system"] == "trl" and "error" not in r}
    rows = []
    for system in systems:
        mine = [r for r in runs if r["system"] == system and "error" not in r]
        vs = [r["samples_per_s"] / trl_by_rep[r["repeat"]]["samples_per_s"] for r in mine if r["repeat"] in trl_by_rep]
        rows.append({"system": system, "samples_per_s": spread([r["samples_per_s"] for r in mine]),
                     "step_s": spread([r["step_s"] for r in mine]),
                     "gpu_busy": spread([r["gpu_busy"] for r in mine if r["gpu_busy"] is not None]),
                     "vs_trl": spread(vs) if system != "trl" else None})
    for r in runs:
        if "error" in r:
            print(f"repeat {r['repeat']} {r['system']}: failed, {r['error'][-300:]}")
    show = lambda s: "-" if s is None else f"{s['median']:.3f} [{s['min']:.3f}, {s['max']:.3f}]"  # noqa: E731
    print_table([{"system": r["system"], **{k: show(r[k]) for k in ("samples_per_s", "step_s", "gpu_busy", "vs_trl")}}
                 for r in rows], ["system", "samples_per_s", "step_s", "gpu_busy", "vs_trl"])
    path = write_result("vs_trl_gpu", {**settings, "rows": rows, "runs": runs}, commit)
    mps = "; CUDA MPS" if settings.get("cuda_mps") else ""
    setting = f"one GPU{mps}, {settings['repeats']} repeats, {settings['steps'] - settings['warmup']} steps each"
    png = plot(rows, runs, f"TRL against rayrl, {settings['tokens']}-token completions; {setting}",
               path.with_suffix(".png"))
    print(f"{setting} -> {path}, {png}")
    return path


def plot(rows: list[dict], runs: list[dict], title: str, out: Path) -> Path | None:
    """Samples/s and GPU busy per system: the median as a bar, each repeat as a dot."""
    if (plt := pyplot()) is None:
        return None
    names = [r["system"] for r in rows]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    for ax, key, label in zip(axes, ("samples_per_s", "gpu_busy"), ("training samples/s", "GPU busy (NVML)")):
        ax.bar(names, [r[key]["median"] if r[key] else 0 for r in rows], color="#8cb4d8")
        for i, name in enumerate(names):
            mine = [r[key] for r in runs if r["system"] == name and r.get(key) is not None]
            ax.scatter([i] * len(mine), mine, color="k", s=10)
        ax.set_ylabel(f"{label}: median, each repeat")
    axes[1].set_ylim(0, 1)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(out)
    return out
