"""The driver-side loop every recipe uses: start Ray, place actors, overlap generation and training
under bounded staleness, sync weights, evaluate before and after, write the run directory."""

from __future__ import annotations

import json
import logging
import os
import time
import uuid
from datetime import datetime
from pathlib import Path

import ray

from rayrl import checkpoint, logs, reaper
from rayrl.actors import CriticGroup, Gateway, LearnerGroup, RewardActor, RolloutWorker, TrajectoryBuffer, WeightBroadcaster
from rayrl.algorithms.mismatch import MISMATCH_KEYS, summarize_mismatch
from rayrl.checkpoint import RunState
from rayrl.config import Config, save_config
from rayrl.data import PromptStream, PromptTemplate, load_tasks, stream_position
from rayrl.faults import ActorFailed, RolloutHealer, RunStopped, StopRequest, learner_stopped, wait_all
from rayrl.metrics import Progress, RayMetrics, RunLog
from rayrl.components import demo_model
from rayrl.models.tokenizer import load_tokenizer
from rayrl.placement import PlacementPlan
from rayrl.placement.storage import check_shared
from rayrl.preflight import preflight
from rayrl.rewards.scoring import failing, merge_stats
from rayrl.types import Task

logger = logging.getLogger("rayrl")


def loopback_only() -> None:
    """Ray's switch for a one-machine cluster (RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0): every process it
    starts binds 127.0.0.1. Ray reads it once at import, so this process's copy is set as well."""
    from ray._private import ray_constants

    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False


def start_ray(cfg: Config, num_cpus: int) -> bool:
    """Start (local) or join (ray) a cluster unless one is already up; True if we started it."""
    if ray.is_initialized():
        return False
    if cfg.scheduler.type == "local":
        if cfg.scheduler.loopback_only:
            loopback_only()
        ray.init(address="local", num_cpus=max(num_cpus, os.cpu_count() or 1),
                 include_dashboard=cfg.scheduler.include_dashboard, dashboard_host=cfg.scheduler.dashboard_host)
        reaper.start(os.getpid())  # the private cluster goes with the driver, even when it is killed
    else:
        ray.init(address=cfg.scheduler.address)
    return True


class Trainer:
    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        logs.configure(cfg.metrics.log_level)
        preflight(cfg)  # before Ray starts and before any model is built
        self.train_tasks, self.eval_tasks = load_tasks(cfg.data)
        name = cfg.metrics.run_name or datetime.now().strftime("%Y%m%d-%H%M%S")
        self.run_dir = Path(cfg.metrics.run_dir) / name
        self.resume_from = checkpoint.find_resume(cfg.checkpoint.resume, self._checkpoint_root())
        if self.resume_from is None:  # a rerun of a name never appends to the earlier run: it gets name-2, ...
            n = 2
            while (self.run_dir / "metrics.jsonl").exists():
                self.run_dir, n = Path(cfg.metrics.run_dir) / f"{name}-{n}", n + 1
        checkpoint.check_writable(self._checkpoint_root())  # fail now, not at the first checkpoint (or SIGTERM)
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
        self.model_path = str(demo_model(cfg))
        check_shared(self._checkpoint_root())  # with several nodes: one directory that every node sees
        self.placement.create()
        # once; kept by the driver, since a restarting rollout worker needs its constructor arguments again
        tokenizer = load_tokenizer(self.model_path)
        self.template_ref = template_ref = ray.put(PromptTemplate(tokenizer))
        version = state.version if state else 0
        self.buffer = TrajectoryBuffer.options(**self._named("buffer", "service")).remote(
            cfg.rollout.batch_size, cfg.rollout.max_staleness, version, state.ledger if state else None,
            cfg.algorithm.dynamic_sampling)
        self.rewards = [RewardActor.options(**self._named(f"reward-{i}", "service"), max_restarts=cfg.reward.max_restarts,
                                            max_task_retries=cfg.reward.max_restarts,
                                            max_concurrency=cfg.reward.max_threads).remote(cfg, i, [os.getcwd()])
                        for i in range(cfg.reward.num_actors)]
        # the OpenAI-compatible endpoint, for agent workflows: it routes each session to its episode's worker
        self.gateway = Gateway.options(**self._named("gateway", "service")).remote(cfg, template_ref, []) \
            if cfg.agent.wants_gateway(cfg.rollout.workflow) else None
        self.gateway_url = ray.get(self.gateway.start.remote()) if self.gateway else ""
        self.rollouts = [
            RolloutWorker.options(**self._named(f"rollout-{i}", "rollout", i), max_restarts=cfg.rollout.max_restarts)
            .remote(i, cfg, self.model_path, template_ref, self.buffer, self.rewards, self.placement.threads("rollout"),
                    self.gateway, self.gateway_url, [os.getcwd()])
            for i in range(cfg.rollout.num_workers)
        ]
        if self.gateway:
            ray.get(self.gateway.set_workers.remote(self.rollouts))
        self.colocated = cfg.placement.mode == "colocate"
        if cfg.placement.mode != "split" and cfg.cluster.n_gpus_per_node > 0:  # vLLM sizes its pools first
            wait_all([w.health.remote() for w in self.rollouts], [f"rollout-{i}" for i in range(len(self.rollouts))],
                     "starting the rollout engines", cfg.rollout.restart_timeout_s)
        self.learners = LearnerGroup(cfg, self.model_path, self.placement, namespace=self.namespace)
        self.broadcaster = WeightBroadcaster.options(**self._named("broadcaster", "service")).remote(
            cfg, self.learners, self.rollouts, self.buffer, version)
        self.weight_sync = ray.get(self.broadcaster.setup.remote())  # tensors, bytes, buckets: in the summary
        # ppo: the critic, a second learner group in the learners' bundles
        self.critics = CriticGroup(cfg, self.model_path, tokenizer.pad_token_id, self.placement, self.namespace) \
            if cfg.algorithm.type == "ppo" else None
        self.actors = [self.buffer, *self.rewards, *self.rollouts, *([self.gateway] if self.gateway else []),
                       *self.learners.workers, self.broadcaster, *(self.critics.workers if self.critics else [])]
        self.metrics = RayMetrics("driver", "driver", {"learner_steps_total": "training steps taken"}, {
            "learner_step_seconds": "the last step's training time", "learner_tokens_per_second": "trained tokens/s",
            "sync_seconds": "the last weight sync", "sync_gb_per_second": "the last weight sync's GB/s",
            "staleness_mean": "mean policy-version lag of the last batch",
            "rollout_restarts": "rollout worker restarts in this run",
            "sampled_reward_mean": "mean reward of the samples scored for the last step",
            "mismatch_abs_mean": "mean |rollout - learner log-prob| of the last step's fresh tokens",
            "token_mult_prob_error": "mean exp|rollout - learner log-prob| of the last step's fresh tokens",
            "mismatch_max": "the last step's worst token gap", "correction_frac": "share of tokens the "
            "off-policy correction masked or truncated in the last step"})
        self.step_records: list[dict] = []  # this process's steps, for the summary's mismatch view
        self.healer = RolloutHealer(self.rollouts, self.buffer, self.broadcaster, cfg.rollout.restart_timeout_s)
        self.prompts = PromptStream(self.train_tasks, cfg.data.seed)
        self.untrained: set[int] = set()  # stream positions fed and not trained yet
        self.dropped_rewards = [0.0, 0]  # reward sum and count of samples dropped for equal rewards
        self.skipped_steps = 0  # steps the learner did not apply: something was not finite
        self.low_prompts = None  # the buffer's answer once its prompt queue runs low (dynamic sampling)
        if state is not None:
            self.learners.load(str(self.resume_from / "learner"))
            if self.critics:
                self.critics.load(str(self.resume_from / "critic"))
            ray.get(self.broadcaster.publish.remote(version))  # rollout workers take the checkpoint's weights
            finished = checkpoint.load_groups(self.resume_from)  # back into the buffer as they were
            ray.get(self.buffer.restore.remote(finished))
            done = {stream_position(g.task.id) for g in finished}
            refed = self.prompts.restore(state.fed, [p for p in state.pending if p not in done])  # in stream order
            self.untrained.update(state.pending)
            if refed:
                ray.get(self.buffer.feed.remote(refed))

    def _named(self, name: str, role: str, index: int = 0) -> dict:
        return {"name": name, "namespace": self.namespace, **self.placement.actor_options(role, index)}

    # ---- pieces of a step --------------------------------------------------------------------
    def feed(self, upto: int) -> None:
        """Take prompts from the stream until `upto` have been fed, for the rollout workers to pull."""
        n = upto - self.prompts.fed
        if n > 0:
            tasks = self.prompts.take(n)
            self.untrained.update(stream_position(t.id) for t in tasks)
            ray.get(self.buffer.feed.remote(tasks))

    def evaluate(self, tasks: list[Task]) -> float:
        """Held-out accuracy (greedy by default): the workflow's episodes, spread over the rollout workers.
        A sample counts as a success at reward >= 1; a task the workflow rejects counts as failed."""
        e, k = self.cfg.eval, len(self.rollouts)
        parts = ray.get([w.evaluate.remote(tasks[i::k], e.samples_per_task, e.temperature)
                         for i, w in enumerate(self.rollouts)])
        successes = sum(s.reward >= 1.0 for part in parts for g in part for s in g.samples)
        return successes / max(1, len(tasks) * e.samples_per_task)

    def next_batch(self, run_refs: list) -> list[list[ray.ObjectRef]]:
        """The buffer's next batch (list-wrapped refs), in stream order; a rollout worker that died
        meanwhile is restarted and rejoins, one whose loop failed raises here instead of hanging."""
        B = self.cfg.rollout.batch_size
        ref = self.buffer.get_batch.remote(B)
        # dynamic sampling uses more prompts than B a step: the buffer answers once fewer than B are queued
        # (one such call outstanding at a time, kept across steps)
        if self.cfg.algorithm.dynamic_sampling and self.low_prompts is None:
            self.low_prompts = self.buffer.wait_prompts_below.remote(B)
        while not ray.wait([ref], timeout=0)[0]:
            low = [self.low_prompts] if self.low_prompts is not None else []
            ready, _ = ray.wait([ref, *low, *run_refs], num_returns=1, timeout=self.cfg.rollout.queue_check_s)
            if dead := self.healer.dead(run_refs):
                self.healer.heal(run_refs, dead)
            if low and ray.wait(low, timeout=0)[0]:
                self.top_up()
                self.low_prompts = self.buffer.wait_prompts_below.remote(B)
            if not ready:
                self.reward_failures()  # a failing reward must stop the run, not starve it of batches
        items = sorted(ray.get(ref), key=lambda item: stream_position(item[1].task_id))
        self.untrained.difference_update(stream_position(meta.task_id) for _, meta in items)
        metas = [meta for _, meta in items]
        self.trained_log.write(json.dumps({"step": self.step, "tasks": [m.task_id for m in metas],
                                           "versions": [m.version for m in metas],
                                           "workers": [m.worker for m in metas]}) + "\n")
        self.trained_log.flush()  # on disk before the step's checkpoint can be
        return [wrapped for wrapped, _meta in items]

    def train(self, refs: list) -> dict:
        """The policy step; with a critic (ppo), its values first and its own step on the returns after."""
        if self.critics is None:
            return self.learners.train(refs)
        values = self.critics.values(refs)
        stats = self.learners.train(refs, values)
        returns = stats.pop("returns")
        return stats if stats.get("skipped") else {**stats, **self.critics.train(refs, returns, values)}

    def train_colocated(self, refs: list) -> dict:
        """Colocated (placement.mode=colocate): the rollout engines sleep, the learner trains, then lets go of
        what it can (optimizer state with learner.offload_optimizer); the sync wakes the engines."""
        t0 = time.perf_counter()
        names = [f"rollout-{i}" for i in range(len(self.rollouts))]
        drain_s = self.cfg.rollout.request_timeout_s + self.cfg.sync.timeout_s  # running requests finish first
        asleep = wait_all([w.sleep.remote() for w in self.rollouts], names, "putting the rollout engines to sleep",
                          drain_s)[0]
        t1 = time.perf_counter()
        stats = self.train(refs)
        t2 = time.perf_counter()
        self.learners.release()
        return {**stats, "mem_generate_gb": asleep["mem_generate_gb"], "mem_asleep_gb": asleep["mem_asleep_gb"],
                "sleep_s": t1 - t0, "release_s": time.perf_counter() - t2}

    def sync_report(self) -> dict:
        """Colocated: the device's memory once the weights were written (before the KV cache returned), and
        how the rollout engine took them (ipc: direct or load_weights)."""
        report = ray.get(self.rollouts[0].sync_report.remote())
        out = {"mem_sync_gb": report.get("mem_sync_gb", 0.0)}
        if "path" in report:
            out.update(sync_path=report["path"], sync_write_s=report["seconds"])
            if report["why"]:  # why vLLM's load_weights took the weights instead of the direct write
                out["sync_path_why"] = report["why"]
        return out

    def check_finite(self, step: int, stats: dict) -> None:
        """A step the learner skipped (non-finite advantages, loss or gradients): counted, or the run stops."""
        if not stats.get("skipped"):
            return
        self.skipped_steps += 1
        logger.warning("step %d skipped: non-finite %s", step, stats["skipped"])
        if self.cfg.learner.nonfinite == "stop":
            raise RunStopped(f"step {step}: non-finite {stats['skipped']}, the update was not applied "
                             "(learner.nonfinite=stop)", exit_code=1)

    def top_up(self) -> None:
        """Dynamic sampling uses more prompts than batch_size a step: keep a batch's worth queued."""
        self.forget_dropped()
        self.feed(self.prompts.fed + self.cfg.rollout.batch_size)

    def forget_dropped(self) -> None:
        """Groups dropped for equal rewards are done with: not pending, never regenerated; their rewards
        still count in the step's sampled reward."""
        ids, total, n = ray.get(self.buffer.take_dropped.remote())
        self.untrained.difference_update(stream_position(t) for t in ids)
        self.dropped_rewards = [self.dropped_rewards[0] + total, self.dropped_rewards[1] + n]

    def sampled_reward(self, stats: dict) -> float:
        """The mean reward of every sample scored since the last step: the trained batch and the groups
        dynamic sampling dropped (without dynamic sampling, the batch's reward_mean)."""
        self.forget_dropped()
        (total, n), self.dropped_rewards = self.dropped_rewards, [0.0, 0]
        return (stats["reward_mean"] * stats["samples"] + total) / (stats["samples"] + n)

    def sync(self, run_refs: list):
        """Weights to every rollout worker as v+1; a worker that died is restarted and the sync redone."""
        try:
            return ray.get(self.broadcaster.sync.remote())
        except (ActorFailed, TimeoutError) as err:
            if getattr(getattr(err, "cause", err), "name", "").startswith("learner"):
                raise  # not survivable: run() names the dead rank and the checkpoint
            ray.wait(run_refs, num_returns=1, timeout=self.cfg.sync.timeout_s)  # a dead worker's loop ends too
            dead = self.healer.dead(run_refs)
            if not dead:
                raise
            logger.warning("weight sync failed (%s); restarting %s", err, dead)
            self.healer.heal(run_refs, dead)
            return ray.get(self.broadcaster.sync.remote())

    def save_checkpoint(self, step: int, samples: int, acc_before: float) -> None:
        """Learner state into a temporary directory, then the buffer's finished groups and the driver's
        state, the manifest, the rename."""
        root = self._checkpoint_root()
        tmp = checkpoint.begin(root, step)
        self.learners.save(str(tmp / "learner"))
        if self.critics:
            self.critics.save(str(tmp / "critic"))
        version = ray.get(self.broadcaster.current_version.remote())
        self.forget_dropped()
        items, ledger = ray.get(self.buffer.snapshot.remote())
        groups = ray.get([wrapped[0] for wrapped, _ in items])
        state = RunState(step, version, self.prompts.fed, sorted(self.untrained), samples, acc_before, ledger,
                         self.wandb_id)
        self.last_checkpoint = str(checkpoint.commit(tmp, root, state, groups, self.cfg.checkpoint.keep))

    # ---- the loop ----------------------------------------------------------------------------
    def run(self) -> dict:
        cfg = self.cfg
        t_start = time.perf_counter()
        state = checkpoint.load_state(self.resume_from) if self.resume_from else None
        self.last_checkpoint = str(self.resume_from) if self.resume_from else None
        self.setup(state)
        self.stop_request = StopRequest()  # SIGTERM: checkpoint at the end of the step, then stop (after ray.init,
        # which installs a handler of its own that ends the process at once)
        if state is None:
            first, samples, acc_before = 1, 0, self.evaluate(self.eval_tasks)
            self.wandb_id = uuid.uuid4().hex[:12]
        else:  # the steps after the checkpoint are redone: their log lines go
            first, samples, acc_before = state.step + 1, state.samples, state.eval_accuracy_before
            self.wandb_id = state.wandb_id or uuid.uuid4().hex[:12]
            for name in ("metrics.jsonl", "trained.jsonl"):
                checkpoint.truncate_metrics(self.run_dir / name, state.step)
        log = RunLog(self.run_dir, cfg.metrics.wandb_project if cfg.metrics.wandb else None,
                     cfg.model_dump(mode="json"), cfg.metrics.wandb_mode, self.wandb_id)
        self.trained_log = (self.run_dir / "trained.jsonl").open("a")  # which tasks each step trained on
        try:
            samples, loop_s, timings, run_refs = self.loop(first, samples, acc_before, log)
        except Exception as err:
            stopped = learner_stopped(self.learners, self.last_checkpoint, err)
            if stopped is not None:
                raise stopped from err
            raise
        finally:
            self.trained_log.close()
            self.stop_request.uninstall()
        n_steps = max(1, cfg.learner.total_steps - first + 1)
        ledger = self.shutdown_rollouts(run_refs)
        acc_after = self.evaluate(self.eval_tasks)
        if cfg.checkpoint.save_final:
            self.learners.save(str(self.run_dir / "final"))
        summary = {
            "eval_accuracy_before": acc_before, "eval_accuracy_after": acc_after,
            "steps": cfg.learner.total_steps, "samples": samples, "wall_s": time.perf_counter() - t_start,
            "loop_s": loop_s, "step_s_mean": loop_s / n_steps, "resumed_from": str(self.resume_from or ""),
            **{f"{k}_per_step": v / n_steps for k, v in timings.items()},
            "generation_s_per_step": self.rollout_totals["gen_s"] / n_steps / max(1, len(self.rollouts)),
            "groups": ledger, "unused_groups": ledger["unused"], "rollout_restarts": self.healer.restarts,
            "rollout_recoveries": self.healer.recoveries,
            "reward_failures": self.reward_failures(), "mismatch": summarize_mismatch(self.step_records),
            "workflow": self.workflow_counts, "gateway": ray.get(self.gateway.stats.remote()) if self.gateway else {},
            "aborted_samples": self.rollout_totals["aborted"], "skipped_steps": self.skipped_steps,
            "max_staleness": cfg.rollout.max_staleness, "weight_sync": self.weight_sync, "nodes": self.placement.nodes(),
            "run_dir": str(self.run_dir), "model_path": self.model_path,
        }
        (self.run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
        log.write({"summary": summary})
        log.close()
        return summary

    def loop(self, first: int, samples: int, acc_before: float, log: RunLog) -> tuple:
        """Steps first..total_steps: batch -> train -> sync -> feed -> log -> checkpoint."""
        cfg = self.cfg
        progress = Progress(cfg.learner.total_steps, cfg.metrics.progress)
        B, lead = cfg.rollout.batch_size, cfg.rollout.max_staleness + cfg.rollout.prompt_lead_batches
        self.feed((lead + first - 1) * B)
        run_refs = [w.run.remote() for w in self.rollouts]
        t_loop, timings = time.perf_counter(), {"wait_s": 0.0, "train_s": 0.0, "sync_s": 0.0, "eval_s": 0.0}
        loop_samples = 0
        for step in range(first, cfg.learner.total_steps + 1):
            self.step = step
            t0 = time.perf_counter()
            refs = self.next_batch(run_refs)
            t1 = time.perf_counter()
            stats = self.train_colocated(refs) if self.colocated else self.train(refs)
            self.check_finite(step, stats)
            t2 = time.perf_counter()
            synced = self.sync(run_refs)  # rollout workers and buffer move to v+1
            t3 = time.perf_counter()
            if self.colocated:
                stats.update(self.sync_report())
            self.feed((lead + step) * B)
            samples += stats["samples"]
            loop_samples += stats["samples"]
            timings["wait_s"] += t1 - t0
            timings["train_s"] += t2 - t1
            timings["sync_s"] += t3 - t2
            rec = {"step": step, **stats, "sampled_reward_mean": self.sampled_reward(stats),
                   "reward_failures": self.reward_failures(), "wait_s": t1 - t0, "train_s": t2 - t1, "sync_s": synced.seconds,
                   "step_s": t3 - t0, "samples_per_s": loop_samples / (t3 - t_loop)}
            eval_every = cfg.eval.every_steps
            if eval_every and step % eval_every == 0 and step < cfg.learner.total_steps:  # the last is the summary's
                t_eval = time.perf_counter()
                rec["eval_accuracy"] = self.evaluate(self.eval_tasks)
                timings["eval_s"] += time.perf_counter() - t_eval
            rec["elapsed_s"] = time.perf_counter() - t_loop - timings["eval_s"]  # training time, evaluations left out
            log.write(rec)
            self.step_records.append({k: rec[k] for k in MISMATCH_KEYS if k in rec})
            progress.update(rec)
            self.publish_metrics(rec, synced)
            every = cfg.checkpoint.every_steps
            if (every and step % every == 0) or self.stop_request:
                self.save_checkpoint(step, samples, acc_before)
            if self.stop_request and step < cfg.learner.total_steps:
                progress.close()
                log.close()
                raise RunStopped(f"stopped by signal {self.stop_request.signal} after step {step}; checkpoint "
                                 f"{self.last_checkpoint}; run the same command again (checkpoint.resume=auto) "
                                 "to continue", exit_code=128 + self.stop_request.signal)
        progress.close()
        return samples, time.perf_counter() - t_loop, timings, run_refs

    def publish_metrics(self, rec: dict, synced) -> None:
        """The step's numbers as Prometheus gauges (role=driver), beside the actors' own."""
        m = self.metrics
        m.inc("learner_steps_total")
        m.set("learner_step_seconds", rec["train_s"])
        m.set("learner_tokens_per_second", rec["tokens"] / max(rec["train_s"], 1e-9))
        m.set("sync_seconds", synced.seconds)
        m.set("sync_gb_per_second", synced.n_bytes / 1e9 / max(synced.seconds, 1e-9))
        m.set("staleness_mean", rec["staleness_mean"])
        m.set("rollout_restarts", sum(self.healer.restarts))
        for key in ("sampled_reward_mean", "mismatch_abs_mean", "token_mult_prob_error", "mismatch_max",
                    "correction_frac"):
            if key in rec:
                m.set(key, rec[key])

    def shutdown_rollouts(self, run_refs: list) -> dict:
        """Stop the loops, wake anything waiting on the buffer; returns the buffer's ledger, in which
        produced = trained + unused + failed + dropped_stale + equal_rewards (dynamic sampling's drops) + rejected
        (tasks the workflow returned None for)."""
        ray.get([w.stop.remote() for w in self.rollouts])
        ray.get(self.buffer.close.remote())
        totals = ray.get(run_refs)  # each loop waits for its episodes still running
        self.workflow_counts = {}
        for t in totals:
            for k, v in t.pop("workflow").items():
                self.workflow_counts[k] = self.workflow_counts.get(k, 0) + v
        self.rollout_totals = {k: sum(t[k] for t in totals) for k in totals[0]}
        stats = ray.get(self.buffer.stats.remote())
        keys = ("produced", "trained", "failed", "dropped_stale", "equal_rewards", "rejected", "requeued")
        return {k: stats[k] for k in keys} | {"unused": stats["waiting"]}

    def reward_failures(self) -> dict[str, int]:
        """Failed samples by reason so far; the first messages of each reason go to reward_failures.json.
        Stops the run when the recent failure share passes reward.max_failure_fraction."""
        r = self.cfg.reward
        stats = merge_stats(ray.get([a.stats.remote() for a in self.rewards]))
        (self.run_dir / "reward_failures.json").write_text(json.dumps(stats, indent=2))
        if why := failing(stats, r.fn, r.max_failure_fraction, r.failure_window):
            raise RunStopped(f"{why}; details in {self.run_dir / 'reward_failures.json'}", exit_code=1)
        return {k: v for k, v in stats["counts"].items() if k != "ok"}

    def close(self) -> None:
        if getattr(self, "rollouts", None):  # vLLM engines run processes of their own; stop them first
            ray.wait([w.shutdown.remote() for w in self.rollouts], num_returns=len(self.rollouts), timeout=20)
        for a in self.actors:
            ray.kill(a)
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
