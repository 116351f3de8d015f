"""rayrl against TRL's GRPOTrainer on CPU: the same locally built model and tokenizer, the arithmetic task, group
size, prompts per step, learning rate, max new tokens, KL setting (none), clip range, loss aggregation and seed.

TRL runs in one process with PyTorch's generate (no vLLM); rayrl runs its recipe with the hf engine and with
vLLM's CPU engine, asynchronous (η = 1), dynamic sampling off so the algorithms match. Held-out accuracy is
greedy exact match on the same tasks, measured on the same schedule on both sides: every --eval-every steps of
the same samples (the JSON's eval_every_samples); evaluation time is left out of every clock. Each repeat runs
the systems in turn, the order reversed every other repeat; with --seeds, repeat i runs every system with seed
i's sampling and learner seeds. The target is fixed: TRL's median final accuracy. Reported per system: the time
to the target of each run (inf where never reached), and the median of those over TRL's median on the same
metric, with a bootstrap 90 % interval; wall time and samples/s; held-out accuracy against training wall time
(one PNG, every run). --rayrl-steps lets rayrl train longer than TRL (unequal: more chances to reach the target;
the default is the same --steps on both sides). TRL is a benchmark-only extra (pip install trl).

    python -m benchmarks.learning.vs_trl [--config arithmetic|long-answers] [--steps 150] [--eval-every 10]
                                [--repeats 5] [--systems trl,rayrl-hf,rayrl-vllm] [--seeds 0,1,2,3,4]
    python -m benchmarks.learning.vs_trl --ladder benchmarks/results/vs_trl-X.json [--targets 0.3,0.35,0.4]
The ladder reads a study's curves again: the same ratio at each of several fixed accuracies (below the final
plateau every run gets there, so the median is a time; at TRL's median final accuracy a run that stops just
short counts as never, and the interval is then unbounded).
Throughput against TRL on one GPU is its own benchmark: benchmarks/performance/vs_trl_gpu.py.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

from benchmarks.common import benchmark_parser, bootstrap_ratio, print_table, spread, write_result
from rayrl.config import Config, load_config
from benchmarks.learning.trl_learning import run_trl, run_trl_child
from rayrl.demo import prepare_models

RECIPE = "recipes/arithmetic_grpo.yaml"
SAME = ["algorithm.dynamic_sampling=false", "algorithm.beta=0.0"]  # what TRL's GRPOTrainer also does
# --config: the recipe as shipped (answers of ~3 tokens), or answers of ~24 tokens (the sum written 8 times) where
# generation is most of a step; its demo model warms up longer to start near the recipe's held-out accuracy
# gpu-arithmetic: one GPU, sums of operands up to 499 (answers of 1-3 digits), a ~180M-parameter demo model warmed up
# on the GPU; rayrl with four vLLM engines beside the compiled FSDP2 learner (as in benchmarks/performance/vs_trl_gpu.py), TRL in the
# variant that --systems names (vLLM colocate)
CONFIGS = {"arithmetic": [],
           "long-answers": ["data.answer_copies=8", "rollout.max_new_tokens=32", "demo.warmup_steps=600"],
           "gpu-arithmetic": [
               "demo.device=cuda", "demo.hidden_size=1024", "demo.num_layers=16", "demo.num_heads=16",
               "demo.num_kv_heads=4", "demo.intermediate_size=2816", "demo.max_position_embeddings=64",
               "demo.warmup_steps=300", "demo.warmup_batch_size=256", "demo.warmup_lr=3e-4", "data.max_operand=499",
               "rollout.max_new_tokens=8", "learner.lr=1e-5", "cluster.n_gpus_per_node=1", "vllm.dtype=bfloat16",
               "vllm.enforce_eager=false", "vllm.max_model_len=64", "learner.backend=fsdp", "learner.dtype=bfloat16",
               "learner.compile=true", "learner.max_tokens_per_micro_batch=16384", "sync.dtype=bfloat16",
               "placement.mode=share", "sync.transport=ipc", "placement.rollouts_per_gpu=4", "rollout.num_workers=4",
               "vllm.gpu_memory_utilization=0.075", "vllm.kv_cache_gb=2", "learner.gpu_memory_fraction=0.6"]}


def hyperparameters(cfg: Config) -> dict:
    r, lc, alg = cfg.rollout, cfg.learner, cfg.algorithm
    low, high = alg.clip_range()
    return {"prompts_per_step": r.batch_size, "group_size": r.group_size, "max_new_tokens": r.max_new_tokens,
            "temperature": r.temperature, "lr": lc.lr, "lr_schedule": lc.lr_schedule, "warmup_steps": lc.lr_warmup_steps,
            "grad_clip": lc.grad_clip, "weight_decay": lc.weight_decay, "beta": alg.beta, "clip": [low, high],
            "advantages": "group mean and std", "aggregation": alg.aggregation(), "seed": lc.seed,
            "activation_checkpointing": lc.activation_checkpointing}


# each hyperparameter as TRL's GRPOConfig and rayrl's config name it (printed side by side)
NAMES = {"prompts_per_step": ("per_device_train_batch_size / num_generations", "rollout.batch_size"),
         "group_size": ("num_generations", "rollout.group_size"),
         "max_new_tokens": ("max_completion_length", "rollout.max_new_tokens"),
         "temperature": ("temperature", "rollout.temperature"), "lr": ("learning_rate", "learner.lr"),
         "lr_schedule": ("lr_scheduler_type", "learner.lr_schedule"), "warmup_steps": ("warmup_steps", "learner.lr_warmup_steps"),
         "grad_clip": ("max_grad_norm", "learner.grad_clip"), "weight_decay": ("weight_decay", "learner.weight_decay"),
         "beta": ("beta", "algorithm.beta"), "clip": ("epsilon, epsilon_high", "algorithm.clip_eps, clip_eps_high"),
         "advantages": ("scale_rewards=group", "algorithm.type=grpo"),
         "aggregation": ("loss_type=dapo", "algorithm.loss_agg"), "seed": ("seed", "learner.seed"),
         "activation_checkpointing": ("gradient_checkpointing (TRL's default: True)", "learner.activation_checkpointing")}


def print_side_by_side(hp: dict) -> None:
    print_table([{"hyperparameter": k, "TRL GRPOConfig": NAMES[k][0], "rayrl config": NAMES[k][1], "value": str(v)}
                 for k, v in hp.items()], ["hyperparameter", "TRL GRPOConfig", "rayrl config", "value"])


def run_rayrl(system: str, steps: int, eval_every: int, overrides: list[str]) -> dict:
    """rayrl-hf, rayrl-vllm, or either with -etaN (rollout.max_staleness; the recipe's own otherwise)."""
    backend, _, eta = system.removeprefix("rayrl-").partition("-eta")
    overrides = [*overrides, *([f"rollout.max_staleness={int(eta)}"] if eta else [])]
    import ray

    from rayrl.driver import start_ray
    from rayrl.trainer import train

    cfg = load_config(RECIPE, [*SAME, *overrides, f"rollout.engine={backend}", f"learner.total_steps={steps}",
                               f"eval.every_steps={eval_every}", "metrics.progress=false",
                               "checkpoint.save_final=false", "checkpoint.every_steps=0",
                               f"metrics.run_name=vs-{system}",
                               "scheduler.include_dashboard=false"])
    start_ray(cfg.scheduler, 3)
    try:
        s = train(cfg)
    finally:
        ray.shutdown()
    records = [json.loads(line) for line in (Path(s["run_dir"]) / "metrics.jsonl").read_text().splitlines()]
    curve = [(0.0, s["eval_accuracy_before"])] + [(r["elapsed_s"], r["eval_accuracy"]) for r in records
                                                  if "eval_accuracy" in r and "step" in r]
    train_s = s["loop_s"] - s["eval_s"]  # evaluations paused out of the clock, as TRL's callback pauses them
    curve.append((train_s, s["eval_accuracy_after"]))
    steps_run = [r for r in records if "step" in r][3:]  # after the first steps' warm-up
    med = lambda key: statistics.median(r[key] for r in steps_run)  # noqa: E731
    return {"system": system, "curve": curve, "wall_s": train_s, "samples_per_s": s["samples"] / train_s,
            # where a step goes: the driver's wait for a batch (generation not hidden), training, the weight sync
            "step_s": med("step_s"), "wait_s": med("wait_s"), "train_s": med("train_s"), "sync_s": med("sync_s"),
            "response_len": statistics.fmean(r["response_len_mean"] for r in steps_run),
            # the rollout runs on while an evaluation is paused out of the clock: a step after one that waits less
            # than the others would be a lead the pause handed over (none where generation is hidden anyway)
            "wait_after_eval_s": statistics.median(
                b["wait_s"] for a, b in zip(records, records[1:]) if "eval_accuracy" in a and "step" in b)
            if eval_every < steps else None}


def time_to(curve: list[tuple[float, float]], target: float) -> float | None:
    return next((t for t, acc in curve if acc >= target), None)


def times_to(runs: list[dict], systems: list[str], target: float) -> dict[str, list[float]]:
    """Per system, each run's training time to the target accuracy (inf where it never got there)."""
    return {s: [math.inf if t is None else t for t in (time_to(r["curve"], target) for r in runs if r["system"] == s)]
            for s in systems}


def plot(runs: list[dict], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    colors = {}
    for r in runs:
        first = r["system"] not in colors
        colors.setdefault(r["system"], f"C{len(colors)}")
        ax.plot(*zip(*r["curve"]), marker="o", ms=3, color=colors[r["system"]], alpha=0.8,
                label=r["system"] if first else None)
    ax.set_xlabel("training wall time (s), evaluation excluded")
    ax.set_ylabel("held-out accuracy (greedy)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out)
    return out


def ladder(source: Path, targets: list[float], commit: str | None) -> Path:
    """Per target accuracy and system: runs that reach it, median time to it, and that over TRL's with its
    bootstrap 90 % interval, from a vs_trl result's curves (no run of its own)."""
    study = json.loads(source.read_text())
    runs, systems = study["runs"], list(dict.fromkeys(r["system"] for r in study["runs"]))
    trl_name = next((s for s in systems if s.startswith("trl")), None)
    if trl_name is None:
        raise SystemExit(f"--ladder {source.name} has no TRL runs (systems {systems}): give a study that ran trl")
    start = max(r["curve"][0][1] for r in runs)
    if min(targets) <= start:
        raise SystemExit(f"--targets {min(targets)} is not above the runs' starting accuracy {start}: a target the "
                         "start already meets takes no time on either side; give targets above it")
    rows = []
    for target in targets:
        to = times_to(runs, systems, target)
        rows += [{"target": target, "system": s, "reached": f"{sum(not math.isinf(t) for t in to[s])}/{len(to[s])}",
                  "median_time_s": statistics.median(to[s]),
                  "vs_trl": None if s == trl_name else bootstrap_ratio(to[s], to[trl_name])} for s in systems]
    path = write_result("vs_trl_ladder", {"source": source.name, "source_commit": study["commit"],
                                          "config": study["config"], "targets": targets, "rows": rows},
                        commit or study["commit"])
    print_table([{**r, "vs_trl": _show(r["vs_trl"])} for r in rows], ["target", "system", "reached", "median_time_s",
                                                                       "vs_trl"])
    print(f"time to each target over TRL's, median with its bootstrap 90 % interval, from {source.name} -> {path}")
    return path


def main() -> None:
    p = benchmark_parser(__doc__)
    p.add_argument("--ladder", type=Path, help="a vs_trl result: report its curves at --targets, run nothing")
    p.add_argument("--targets", default="0.3,0.33,0.35,0.37,0.38,0.39,0.4", help="with --ladder: accuracies")
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--rayrl-steps", type=int, default=None, help="rayrl's steps (default: --steps)")
    p.add_argument("--eval-every", type=int, default=10)
    p.add_argument("--systems", default="trl,rayrl-hf,rayrl-vllm")
    p.add_argument("--config", choices=sorted(CONFIGS), default="arithmetic", help="the task's settings")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--seeds", default="", help="one seed per repeat (learner.seed, rollout.seed, TRL's seed)")
    p.add_argument("overrides", nargs="*")
    args = p.parse_args()
    if args.ladder:
        ladder(args.ladder, [float(x) for x in args.targets.split(",")], args.commit)
        return
    args.overrides = [*CONFIGS[args.config], *args.overrides]
    cfg = load_config(RECIPE, [*SAME, *args.overrides])
    model_path = prepare_models(cfg).policy
    systems, runs, partial = args.systems.split(","), [], None
    seeds = [int(x) for x in args.seeds.split(",") if x]
    for rep in range(args.repeats):
        seed = seeds[rep % len(seeds)] if seeds else cfg.learner.seed
        seeded = [f"learner.seed={seed}", f"rollout.seed={seed}"] if seeds else []
        for system in (systems if rep % 2 == 0 else systems[::-1]):
            steps = args.steps if system.startswith("trl") else args.rayrl_steps or args.steps
            if system.startswith("trl"):
                trl_overrides = [*SAME, *args.overrides, *seeded]
                trl_cfg = load_config(RECIPE, trl_overrides)
                trl = run_trl_child if trl_cfg.on_gpu else (lambda _recipe, _ovr, *rest: run_trl(trl_cfg, *rest))
                run = trl(RECIPE, trl_overrides, hyperparameters(trl_cfg), model_path, args.steps, args.eval_every,
                          system)
            else:
                run = run_rayrl(system, steps, args.eval_every, [*args.overrides, *seeded])
            runs.append({"repeat": rep, "seed": seed, "steps": steps, **run, "final_accuracy": run["curve"][-1][1]})
            print(f"repeat {rep} {system}: final accuracy {runs[-1]['final_accuracy']:.3f}, "
                  f"{run['wall_s']:.1f} s", flush=True)
            # every finished run kept on disk at once: a run cut off later (a device call's limit) loses only itself
            partial = write_result("vs_trl-partial", {"config": args.config, "overrides": args.overrides, "runs": runs},
                                   args.commit, path=partial)
    report_cpu(args, cfg, systems, runs, seeds)
    if partial:  # only once the whole result is written: a failed report keeps every run
        partial.unlink()


def report_cpu(args, cfg: Config, systems: list[str], runs: list[dict], seeds: list[int]) -> None:
    """Time to a fixed target (TRL's median final accuracy) on both sides on the same evaluation schedule; the
    ratio of median times with a bootstrap 90 % interval (a run that never reaches the target counts as inf)."""
    trl_name = next((s for s in systems if s.startswith("trl")), None)  # the one TRL system timed against
    trl = [r for r in runs if r["system"] == trl_name]
    target = statistics.median(r["final_accuracy"] for r in trl) if trl else None
    to_target = times_to(runs, systems, target) if trl else {s: [] for s in systems}  # no TRL: no target
    rows = []
    for system in systems:
        mine = [r for r in runs if r["system"] == system]
        reached = [t for t in to_target[system] if not math.isinf(t)]
        rows.append({"system": system, "final_accuracy": spread([r["final_accuracy"] for r in mine]),
                     "wall_s": spread([r["wall_s"] for r in mine]), "samples_per_s": spread([r["samples_per_s"] for r in mine]),
                     **{k: spread([r[k] for r in mine]) for k in ("step_s", "wait_s", "train_s", "sync_s") if k in mine[0]},
                     "reached": f"{len(reached)}/{len(mine)}" if trl else None, "time_to_target_s": spread(reached),
                     "median_time_to_target_s": statistics.median(to_target[system]) if trl else None,
                     "vs_trl_time_to_target": bootstrap_ratio(to_target[system], to_target[trl_name]) if trl else None})
    batch = cfg.rollout.batch_size * cfg.rollout.group_size
    path = write_result("vs_trl", {"config": args.config, "overrides": args.overrides, "steps": args.steps,
                                   "rayrl_steps": args.rayrl_steps or args.steps, "eval_every_steps": args.eval_every,
                                   "eval_every_samples": args.eval_every * batch,
                                   "repeats": args.repeats, "seeds": seeds, "hyperparameters": hyperparameters(cfg),
                                   "target": target, "rows": rows, "runs": runs}, args.commit)
    png = plot(runs, path.with_suffix(".png"))
    print_side_by_side(hyperparameters(cfg))
    columns = ["system", "final_accuracy", "wall_s", "samples_per_s", "step_s", "wait_s", "train_s", "reached",
               "median_time_to_target_s", "vs_trl_time_to_target"]
    print_table([{k: _show(v) for k, v in r.items()} for r in rows], columns)
    print(f"target (TRL's median final accuracy) {target}, evaluated every {args.eval_every * batch} samples on both "
          f"sides; vs_trl_time_to_target: median time to it over TRL's, bootstrap 90 % interval -> {path}, {png}")


def _show(v) -> str:
    if isinstance(v, dict) and "ratio" in v:
        return f"{v['ratio']:.3f} [{v['low']:.3f}, {v['high']:.3f}]"
    return f"{v['median']:.3f} [{v['min']:.3f}, {v['max']:.3f}]" if isinstance(v, dict) else str(v)


if __name__ == "__main__":
    main()
