"""The driver-side loop every recipe uses: start Ray, place actors, overlap generation and training
under bounded staleness, sync weights, evaluate before and after, write the run directory."""

from __future__ import annotations

import json
import os
import time
from datetime import datetime
from pathlib import Path

import ray
from ray.util.queue import Queue

from rayrl import checkpoint
from rayrl.actors import LearnerGroup, RewardActor, RolloutWorker, TrajectoryBuffer, WeightBroadcaster
from rayrl.checkpoint import RunState
from rayrl.config import Config, save_config
from rayrl.data import PromptStream, PromptTemplate, load_tasks, stream_position
from rayrl.metrics import Progress, RunLog
from rayrl.models import build_model
from rayrl.placement import PlacementPlan
from rayrl.types import Task


def start_ray(cfg: Config, num_cpus: int) -> bool:
    """Start (local) or join (ray) a cluster unless one is already up; True if we started it."""
    if ray.is_initialized():
        return False
    if cfg.scheduler.type == "local":
        ray.init(address="local", num_cpus=max(num_cpus, os.cpu_count() or 1),
                 include_dashboard=cfg.scheduler.include_dashboard, dashboard_host=cfg.scheduler.dashboard_host)
    else:
        ray.init(address=cfg.scheduler.address)
    return True


class Trainer:
    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.train_tasks, self.eval_tasks = load_tasks(cfg.data)
        name = cfg.metrics.run_name or datetime.now().strftime("%Y%m%d-%H%M%S")
        self.run_dir = Path(cfg.metrics.run_dir) / name
        self.resume_from = checkpoint.find_resume(cfg.checkpoint.resume, self._checkpoint_root())
        if self.resume_from is None:  # a rerun of a name never appends to the earlier run: it gets name-2, ...
            n = 2
            while (self.run_dir / "metrics.jsonl").exists():
                self.run_dir, n = Path(cfg.metrics.run_dir) / f"{name}-{n}", n + 1
        if cfg.checkpoint.every_steps:
            checkpoint.check_writable(self._checkpoint_root())  # fail now, not at the first checkpoint
        # role names (rollout-0, buffer, ...) live in a namespace of this run, so runs never collide
        self.namespace = f"rayrl-{self.run_dir.name}"
        self.actors: list = []

    def _checkpoint_root(self) -> Path:
        d = self.cfg.checkpoint.dir
        return Path(d).expanduser() if d else self.run_dir / "checkpoints"

    # ---- setup ------------------------------------------------------------------------------
    def setup(self, state: RunState | None = None) -> None:
        """Start or join Ray, place and create every actor; with a state, continue from it: the learner
        loads its checkpoint and the rollout workers get its weights as the state's version."""
        cfg = self.cfg
        self.run_dir.mkdir(parents=True, exist_ok=True)
        save_config(cfg, self.run_dir / "config.yaml")
        self.placement = PlacementPlan(cfg, name=f"rayrl-{self.run_dir.name}")
        self.started_ray = start_ray(cfg, self.placement.total_cpus)
        self.model_path = str(build_model(cfg))
        self.placement.create()
        from transformers import AutoTokenizer

        template_ref = ray.put(PromptTemplate(AutoTokenizer.from_pretrained(self.model_path)))  # once
        self.queue = Queue(actor_options={"num_cpus": 0, "name": "prompts", "namespace": self.namespace})
        version, trained = (state.version, state.step * cfg.rollout.batch_size) if state else (0, 0)
        self.buffer = TrajectoryBuffer.options(**self._named("buffer", "service")).remote(
            cfg.rollout.batch_size, cfg.rollout.max_staleness, version, trained)
        self.rewards = [RewardActor.options(**self._named(f"reward-{i}", "service")).remote(cfg)
                        for i in range(cfg.reward.num_actors)]
        self.rollouts = [
            RolloutWorker.options(**self._named(f"rollout-{i}", "rollout", i)).remote(
                i, cfg, self.model_path, template_ref, self.queue, self.buffer, self.rewards,
                self.placement.threads("rollout"))
            for i in range(cfg.rollout.num_workers)
        ]
        self.learners = LearnerGroup(cfg, self.model_path, self.placement, namespace=self.namespace)
        self.broadcaster = WeightBroadcaster.options(**self._named("broadcaster", "service")).remote(
            cfg, self.learners, self.rollouts, self.buffer, version)
        self.weight_sync = ray.get(self.broadcaster.setup.remote())  # tensors, bytes, buckets: in the summary
        self.actors = [self.buffer, *self.rewards, *self.rollouts, *self.learners.workers, self.broadcaster]
        self.prompts = PromptStream(self.train_tasks, cfg.data.seed)
        self.untrained: set[int] = set()  # stream positions fed and not trained yet
        if state is not None:
            self.learners.load(str(self.resume_from / "learner"))
            ray.get(self.broadcaster.publish.remote(version))  # rollout workers take the checkpoint's weights
            refed = self.prompts.restore(state.fed, state.pending)  # regenerated, in stream order
            self.untrained.update(state.pending)
            if refed:
                self.queue.put_nowait_batch(refed)

    def _named(self, name: str, role: str, index: int = 0) -> dict:
        return {"name": name, "namespace": self.namespace, **self.placement.actor_options(role, index)}

    # ---- pieces of a step --------------------------------------------------------------------
    def feed(self, upto: int) -> None:
        """Take prompts from the stream until `upto` have been fed, for the rollout workers to pull."""
        n = upto - self.prompts.fed
        if n > 0:
            tasks = self.prompts.take(n)
            self.untrained.update(stream_position(t.id) for t in tasks)
            self.queue.put_nowait_batch(tasks)

    def evaluate(self, tasks: list[Task]) -> float:
        """Held-out accuracy (greedy by default), spread over the rollout workers, scored by reward actors."""
        r, k = self.cfg.rollout, len(self.rollouts)
        gen = [w.generate_groups.remote(tasks[i::k], r.eval_samples_per_task, r.eval_temperature)
               for i, w in enumerate(self.rollouts)]
        groups = [g for part in ray.get(gen) for g in part]
        scored = ray.get([self.rewards[i % len(self.rewards)].score.remote(g) for i, g in enumerate(groups)])
        samples = [s for g in scored for s in g.samples]
        return sum(s.reward >= 1.0 for s in samples) / max(1, len(samples))

    def next_batch(self, run_refs: list) -> list[list[ray.ObjectRef]]:
        """The buffer's next batch (list-wrapped refs); a rollout loop that died meanwhile raises here
        instead of hanging."""
        ref = self.buffer.get_batch.remote(self.cfg.rollout.batch_size)
        ready, _ = ray.wait([ref, *run_refs], num_returns=1)
        if ready[0] != ref:
            ray.get(ready[0])  # raises the rollout worker's error
            raise RuntimeError("a rollout worker's loop ended while training was still running")
        items = ray.get(ref)
        self.untrained.difference_update(stream_position(meta.task_id) for _, meta in items)
        return [wrapped for wrapped, _meta in items]

    def save_checkpoint(self, step: int, samples: int, acc_before: float) -> None:
        """Learner state into a temporary directory, then the driver's state, the manifest, the rename."""
        root = self._checkpoint_root()
        tmp = checkpoint.begin(root, step)
        self.learners.save(str(tmp / "learner"))
        version = ray.get(self.broadcaster.current_version.remote())
        state = RunState(step, version, self.prompts.fed, sorted(self.untrained), samples, acc_before)
        checkpoint.commit(tmp, root, state, self.cfg.checkpoint.keep)

    # ---- the loop ----------------------------------------------------------------------------
    def run(self) -> dict:
        cfg = self.cfg
        t_start = time.perf_counter()
        state = checkpoint.load_state(self.resume_from) if self.resume_from else None
        self.setup(state)
        if state is None:
            first, samples, acc_before = 1, 0, self.evaluate(self.eval_tasks)
        else:  # the steps after the checkpoint are redone: their metrics lines go
            first, samples, acc_before = state.step + 1, state.samples, state.eval_accuracy_before
            checkpoint.truncate_metrics(self.run_dir / "metrics.jsonl", state.step)
        log = RunLog(self.run_dir, cfg.metrics.wandb_project if cfg.metrics.wandb else None,
                     cfg.model_dump(mode="json"), cfg.metrics.wandb_mode)
        progress = Progress(cfg.learner.total_steps, cfg.metrics.progress)
        B, lead = cfg.rollout.batch_size, cfg.rollout.max_staleness + cfg.rollout.prompt_lead_batches
        self.feed((lead + first - 1) * B)
        run_refs = [w.run.remote() for w in self.rollouts]
        t_loop, timings = time.perf_counter(), {"wait_s": 0.0, "train_s": 0.0, "sync_s": 0.0}
        loop_samples = 0
        for step in range(first, cfg.learner.total_steps + 1):
            t0 = time.perf_counter()
            refs = self.next_batch(run_refs)
            t1 = time.perf_counter()
            stats = self.learners.train(refs)
            t2 = time.perf_counter()
            synced = ray.get(self.broadcaster.sync.remote())  # rollout workers and buffer move to v+1
            t3 = time.perf_counter()
            self.feed((lead + step) * B)
            samples += stats["samples"]
            loop_samples += stats["samples"]
            timings["wait_s"] += t1 - t0
            timings["train_s"] += t2 - t1
            timings["sync_s"] += t3 - t2
            rec = {"step": step, **stats, "wait_s": t1 - t0, "train_s": t2 - t1, "sync_s": synced.seconds,
                   "step_s": t3 - t0, "samples_per_s": loop_samples / (t3 - t_loop)}
            log.write(rec)
            progress.update(rec)
            if cfg.checkpoint.every_steps and step % cfg.checkpoint.every_steps == 0:
                self.save_checkpoint(step, samples, acc_before)
        loop_s, n_steps = time.perf_counter() - t_loop, max(1, cfg.learner.total_steps - first + 1)
        progress.close()
        unused = self.shutdown_rollouts(run_refs)
        acc_after = self.evaluate(self.eval_tasks)
        if cfg.checkpoint.save_final:
            self.learners.save(str(self.run_dir / "final"))
        summary = {
            "eval_accuracy_before": acc_before, "eval_accuracy_after": acc_after,
            "steps": cfg.learner.total_steps, "samples": samples, "wall_s": time.perf_counter() - t_start,
            "loop_s": loop_s, "step_s_mean": loop_s / n_steps, "resumed_from": str(self.resume_from or ""),
            **{f"{k}_per_step": v / n_steps for k, v in timings.items()},
            "generation_s_per_step": self.rollout_totals["gen_s"] / n_steps / max(1, len(self.rollouts)),
            "unused_groups": unused, "reward_failures": self.reward_failures(),
            "aborted_samples": self.rollout_totals["aborted"],
            "max_staleness": cfg.rollout.max_staleness, "weight_sync": self.weight_sync,
            "run_dir": str(self.run_dir), "model_path": self.model_path,
        }
        (self.run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
        log.write({"summary": summary})
        log.close()
        return summary

    def shutdown_rollouts(self, run_refs: list) -> int:
        """Stop the loops, wake anything waiting on the buffer; returns finished-but-unused groups."""
        ray.get([w.stop.remote() for w in self.rollouts])
        unused = ray.get(self.buffer.close.remote())
        totals = ray.get(run_refs)
        self.rollout_totals = {k: sum(t[k] for t in totals) for k in totals[0]}
        return unused

    def reward_failures(self) -> dict[str, int]:
        counts = ray.get([r.stats.remote() for r in self.rewards])
        return {k: sum(c.get(k, 0) for c in counts) for k in ("error", "timeout")}

    def close(self) -> None:
        if getattr(self, "rollouts", None):  # vLLM engines run processes of their own; stop them first
            ray.wait([w.shutdown.remote() for w in self.rollouts], num_returns=len(self.rollouts), timeout=60)
        for a in self.actors:
            ray.kill(a)
        if getattr(self, "queue", None) is not None:
            self.queue.shutdown()
        if getattr(self, "placement", None) is not None:
            self.placement.remove()
        if getattr(self, "started_ray", False):
            ray.shutdown()


def train(cfg: Config) -> dict:
    """Run one training job end to end and return its summary."""
    trainer = Trainer(cfg)
    try:
        return trainer.run()
    finally:
        trainer.close()
