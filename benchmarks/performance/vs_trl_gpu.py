"""rayrl against TRL's GRPOTrainer on one GPU, throughput at equal work (random weights learn nothing):
a Qwen2-0.5B- or 1.5B-shaped model (--shape), the same char tokenizer and arithmetic prompts, 32 prompts x 8
samples a step, every completion exactly --tokens long (EOS ignored on both sides), lr 1e-6, no KL, bf16 compute
over fp32 weights.

Systems (--systems, comma-separated), each named by its settings:
  trl[-mbN][-memX][-gbsN][-liger][-compile][-nois][-detok]   TRL in vLLM colocate mode (benchmarks.performance.trl_gpu, a child
      process), tuned as its users tune it (trl_gpu.TUNED); the parts sweep its knobs: micro-batch, vLLM's memory
      share, its off-policy generation batch, Liger kernels, torch.compile, the IS correction off (its ceiling)
  rayrl-etaN[-enginesK][-eager][-padded]   rayrl, placement.mode=share: K vLLM engines (default 4) beside the
      compiled FSDP2 learner with packed micro-batches, weights over CUDA IPC, max staleness N; -eager: the
      learner not compiled (its log-prob head in chunks of 2,048 rows, as fits eager); -padded: padded
      micro-batches. The ablation of where rayrl's speed comes from.
Both sides are measured the same way: the mean step over the window after --warmup (the throughput a user gets),
every step's time kept in the JSON; TRL's phases (generation, weight sync, its whole rollout) per step as well.
Repeats alternate the order of the systems. Reported per system: training samples/s, step time, GPU busy
(NVML), medians and ranges over repeats, and each rayrl system's samples/s over the best TRL system's (the TRL
system with the highest median) in the same repeat.

    python -m benchmarks.performance.vs_trl_gpu --systems trl-mb64,trl-mb256,rayrl-eta0,rayrl-eta4 [--shape 1.5b] ...
    python -m benchmarks.performance.vs_trl_gpu --merge A.json B.json  # runs of several invocations as repeats of one
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from benchmarks.performance.async_vs_sync import gpu_overrides, run_once
from benchmarks.common import as_repeats, benchmark_parser, merged_commit, outside_ray_env, print_table, pyplot, spread, write_result
from benchmarks.performance.gpu_busy import GpuBusySampler, cuda_mps
from benchmarks.performance.learner_mfu import SHAPES
from benchmarks.performance.trl_gpu import MARKER, variant, versions
from rayrl.testing.random_qwen2 import save_random_qwen2
from rayrl.models.tokenizer import TEXT_CHARS

PROMPTS, GROUP, LR = 32, 8, 1e-6


def rayrl_overrides(name: str, model: Path, tokens: int, shape: str) -> tuple[int, list[str]]:
    """'rayrl-eta4-engines1-eager' -> (η, config overrides)."""
    parts = name.removeprefix("rayrl-").split("-")
    if not parts[0].startswith("eta") or not parts[0][3:].isdigit():
        raise ValueError(f"a rayrl system's name is rayrl-etaN[-enginesK][-eager][-padded], got {name!r}")
    engines, extra = 4, []
    for part in parts[1:]:
        if part.startswith("engines") and part[7:].isdigit():
            engines = int(part[7:])
        elif part == "eager":  # unfused, the head's fp32 temporaries of 8,192 rows overflow an 80 GB card's share
            extra += ["learner.compile=false", "learner.logprob_chunk_tokens=2048"]
        elif part == "padded":
            extra.append("learner.pack_sequences=false")
        else:
            raise ValueError(f"unknown part {part!r} of rayrl system {name!r}: expected enginesK, eager or padded")
    return int(parts[0][3:]), gpu_overrides(1, model, tokens, shape=shape, engines=engines) + extra


def run_trl(model: Path, settings: dict, warmup: int, sampler: GpuBusySampler, timeout_s: float) -> dict:
    """TRL in a child process without Ray's environment; its step ends give the window, its phases the split."""
    proc = subprocess.run([sys.executable, "-m", "benchmarks.performance.trl_gpu", str(model), json.dumps(settings)],
                          capture_output=True, text=True, timeout=timeout_s, env=outside_ray_env())
    line = next((x for x in proc.stdout.splitlines() if x.startswith(MARKER)), None)
    if line is None:
        first = proc.stderr.find("Traceback")
        raise RuntimeError(f"TRL's run failed (rc {proc.returncode}):\n{proc.stderr[max(0, first):][:3000]}\n...\n"
                           f"{proc.stderr[-3000:]}")
    out = json.loads(line[len(MARKER):])
    ends = out["step_ends"]
    start, end, steps = ends[warmup], ends[-1], [b - a for a, b in zip(ends, ends[1:])]
    n = len(steps) - warmup
    per_step = lambda name: sum(b - a for a, b in out["phases"][name] if start <= a and b <= end) / n  # noqa: E731
    busy = sampler.busy(start, end)
    return {"step_s": (end - start) / n, "samples_per_s": out["samples_per_step"] * n / (end - start),
            "gpu_busy": busy[0] if busy else None, "step_median_s": statistics.median(steps[warmup:]),
            "per_step": [{"step_s": s, "warmup": i < warmup} for i, s in enumerate(steps)],
            "generate_s": per_step("generate"), "sync_s": per_step("sync_weights"), "rollout_s": per_step("rollout"),
            "steps_per_generation": out["steps_per_generation"], "versions": out["versions"],
            "gradient_accumulation_steps": out["gradient_accumulation_steps"]}


def run_rayrl(eta: int, overrides: list[str], args, name: str, sampler: GpuBusySampler) -> dict:
    run = run_once(None, overrides, eta, args.steps, args.warmup, name, sampler)
    keep = ("step_s", "samples_per_s", "step_median_s", "wait_s", "train_sync_s", "train_s", "sync_s", "per_step",
            "halves_step_s")
    return {**{k: run[k] for k in keep}, "gpu_busy": run["gpu_busy"][0] if run["gpu_busy"] else None,
            "versions": versions()}


def parse_args():
    p = benchmark_parser(__doc__)
    p.add_argument("--systems", default="trl,rayrl-eta0,rayrl-eta4", help="comma-separated names (above)")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--warmup", type=int, default=2, help="first steps left out")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--shape", choices=sorted(SHAPES), default="0.5b", help="the model's shape")
    p.add_argument("--tokens", type=int, default=256, help="tokens per completion (EOS ignored)")
    p.add_argument("--trl-timeout", type=float, default=900.0, help="seconds for one TRL run")
    p.add_argument("--reverse-first", action="store_true", help="the first repeat runs the systems backwards")
    p.add_argument("--merge", nargs="+", help="result JSONs of earlier invocations, merged as repeats")
    p.add_argument("overrides", nargs="*", help="rayrl config overrides (key=value)")
    return p.parse_args()


def main(args, overrides: list[str]) -> None:
    import ray

    systems = args.systems.split(",")
    model = save_random_qwen2(Path(tempfile.mkdtemp()) / f"qwen2-{args.shape}", chars=TEXT_CHARS, dtype=torch.float32,
                              **SHAPES[args.shape])
    common = {"steps": args.steps, "prompts": PROMPTS, "group_size": GROUP, "max_new_tokens": args.tokens, "lr": LR,
              "max_model_len": 512}
    per_system = {}
    for system in systems:  # every name checked before anything runs
        if system.startswith("trl"):
            per_system[system] = {**common, **variant(system)}
        else:
            eta, ovr = rayrl_overrides(system, model, args.tokens, args.shape)
            per_system[system] = {"eta": eta, "overrides": ovr + overrides}
    settings = {"gpus": 1, "shape": args.shape, "steps": args.steps, "warmup": args.warmup, "repeats": args.repeats,
                "tokens": args.tokens, "cuda_mps": cuda_mps(),  # the model's temporary path left out: files merge
                "systems": {n: {**v, "overrides": [o for o in v["overrides"] if not o.startswith("model.")]}
                            if "overrides" in v else v for n, v in per_system.items()}}
    runs, partial = [], None
    with GpuBusySampler() as sampler:
        for rep in range(args.repeats):
            for system in (systems if (rep + args.reverse_first) % 2 == 0 else systems[::-1]):
                try:
                    if system.startswith("trl"):
                        run = run_trl(model, per_system[system], args.warmup, sampler, args.trl_timeout)
                    else:
                        mine = per_system[system]
                        run = run_rayrl(mine["eta"], mine["overrides"], args, f"vs-trl-gpu-{rep}-{system}", sampler)
                except (RuntimeError, subprocess.TimeoutExpired) as err:  # reported and kept; the others still run
                    print(f"repeat {rep} {system} failed: {err}", flush=True)
                    runs.append({"repeat": rep, "system": system, "error": str(err)})
                else:
                    runs.append({"repeat": rep, "system": system, **run})
                    print(f"repeat {rep} {system}: {run['samples_per_s']:.1f} samples/s, step {run['step_s']:.3f} s",
                          flush=True)
                # after every system, failed ones too: a call cut off later keeps what ran
                partial = write_result("vs_trl_gpu-partial", {**settings, "runs": runs}, args.commit, path=partial)
    if ray.is_initialized():
        ray.shutdown()
    if partial:
        partial.unlink()
    report(runs, settings, args.commit)


def merge(files: list[str], commit: str | None) -> Path:
    """The runs of several result files (same shape, window and tokens) as the repeats of one result; a system's
    settings must match wherever it appears."""
    parts = [json.loads(Path(f).read_text()) for f in files]
    old = [f for f, p in zip(files, parts) if "systems" not in p]
    if old:
        raise SystemExit(f"--merge: {old} were written before systems were named by their settings (TRL then ran "
                         "at memory share 0.3 with detokenizing on, as the system 'trl-mem0.3-detok' now)")
    keys = ("shape", "steps", "warmup", "tokens", "cuda_mps")
    if any([p[k] for k in keys] != [parts[0][k] for k in keys] for p in parts):
        raise SystemExit(f"--merge: the files differ in {keys}; only runs of one setting can be merged")
    systems: dict[str, dict] = {}
    for p in parts:
        for name, s in p["systems"].items():
            if systems.setdefault(name, s) != s:
                raise SystemExit(f"--merge: system {name} ran with different settings in different files")
    runs, offset = as_repeats(parts)
    settings = {"gpus": 1, **{k: parts[0][k] for k in keys}, "systems": systems, "repeats": offset,
                "merged": [p["commit"] for p in parts], "merged_files": [Path(f).name for f in files],
                "measured_on": parts[0]["machine"]}
    return report(runs, settings, commit or merged_commit(parts))


def summarize(runs: list[dict]) -> list[dict]:
    """Per system: medians and ranges over repeats, and its samples/s over the best TRL system's, repeat by repeat."""
    ok = [r for r in runs if "error" not in r]
    names = list(dict.fromkeys(r["system"] for r in sorted(ok, key=lambda r: not r["system"].startswith("trl"))))
    rate = {n: statistics.median(r["samples_per_s"] for r in ok if r["system"] == n) for n in names}
    trls = [n for n in names if n.startswith("trl")]
    best = max(trls, key=rate.get) if trls else None
    best_by_rep = {r["repeat"]: r["samples_per_s"] for r in ok if r["system"] == best}
    rows = []
    for name in names:
        mine = [r for r in ok if r["system"] == name]
        vs = [r["samples_per_s"] / best_by_rep[r["repeat"]] for r in mine if r["repeat"] in best_by_rep]
        rows.append({"system": name, "runs": len(mine), "best_trl": name == best,
                     **{k: spread([r[k] for r in mine if r.get(k) is not None])
                        for k in ("samples_per_s", "step_s", "gpu_busy", "generate_s", "sync_s", "rollout_s",
                                  "wait_s", "train_sync_s")},
                     "vs_best_trl": spread(vs) if name != best else None})
    return rows


def report(runs: list[dict], settings: dict, commit: str | None) -> Path:
    rows = summarize(runs)
    for r in runs:
        if "error" in r:
            print(f"repeat {r['repeat']} {r['system']}: failed, {r['error'][-300:]}")
    show = lambda s: "-" if s is None else f"{s['median']:.3f} [{s['min']:.3f}, {s['max']:.3f}]"  # noqa: E731
    short = lambda s: "-" if s is None else f"{s['median']:.2f}"  # noqa: E731
    print_table([{"system": r["system"] + (" (best TRL)" if r["best_trl"] else ""), "runs": r["runs"],
                  **{k: show(r[k]) for k in ("samples_per_s", "step_s", "vs_best_trl")},
                  "gpu_busy": short(r["gpu_busy"]),
                  "gen/sync/rollout": "/".join(short(r[k]) for k in ("generate_s", "sync_s", "rollout_s")),
                  "wait/train+sync": "/".join(short(r[k]) for k in ("wait_s", "train_sync_s"))} for r in rows],
                ["system", "runs", "samples_per_s", "step_s", "vs_best_trl", "gpu_busy", "gen/sync/rollout",
                 "wait/train+sync"])
    path = write_result("vs_trl_gpu", {**settings, "rows": rows, "runs": runs}, commit)
    mps = "; CUDA MPS" if settings.get("cuda_mps") else ""
    setting = (f"one GPU{mps}, {settings['shape']} shape, {settings['repeats']} repeats, "
               f"{settings['steps'] - settings['warmup']} steps each")
    png = plot(rows, runs, f"TRL against rayrl, {settings['tokens']}-token completions; {setting}",
               path.with_suffix(".png"))
    print(f"{setting} -> {path}, {png}")
    return path


def plot(rows: list[dict], runs: list[dict], title: str, out: Path) -> Path | None:
    """Samples/s and GPU busy per system: the median as a bar, each repeat as a dot."""
    if (plt := pyplot()) is None:
        return None
    names = [r["system"] for r in rows]
    fig, axes = plt.subplots(1, 2, figsize=(4 + 0.9 * len(names), 3.8))
    for ax, key, label in zip(axes, ("samples_per_s", "gpu_busy"), ("training samples/s", "GPU busy (NVML)")):
        ax.bar(names, [r[key]["median"] if r[key] else 0 for r in rows], color="#8cb4d8")
        for i, name in enumerate(names):
            mine = [r[key] for r in runs if r["system"] == name and r.get(key) is not None]
            ax.scatter([i] * len(mine), mine, color="k", s=10)
        ax.set_ylabel(f"{label}: median, each repeat")
        ax.tick_params(axis="x", labelrotation=60, labelsize=7)
    axes[1].set_ylim(0, 1)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(out)
    return out


if __name__ == "__main__":
    _args = parse_args()
    if _args.merge:
        merge(_args.merge, _args.commit)
    else:
        main(_args, list(_args.overrides))
