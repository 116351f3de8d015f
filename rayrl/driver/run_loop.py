"""RunLoop: one run's asynchronous step over the driver's owners. loop() is the step itself: take a batch the
buffer admitted under the staleness bound, train on it, push the weights to the rollout workers as the learner's step,
report, checkpoint. Everything around it belongs to an owner set up in __init__."""

from __future__ import annotations

import logging
import time
import uuid

import ray

from rayrl import checkpoint
from rayrl.checkpoint import RunState
from rayrl.config import Config
from rayrl.data import stream_position
from rayrl.driver.elastic import ElasticScaler
from rayrl.driver.failover import LearnerFailover
from rayrl.driver.fleet import RolloutFleet
from rayrl.driver.prompts import PromptFeeder
from rayrl.driver.reporter import StepReporter
from rayrl.driver.reward_watch import RewardWatch
from rayrl.driver.threads import ThreadBudget
from rayrl.faults import LearnerFailed, RunStopped, StopRequest
from rayrl.group_refs import get_groups
from rayrl.image_refs import with_images
from rayrl.progress import NoProgress
from rayrl.rewards.combine import agreement
from rayrl.types import Task

log = logging.getLogger("rayrl")


class RunLoop:
    def __init__(self, cfg: Config, system, run_dir, tasks: tuple[list[Task], list[Task]],
                 state: RunState | None = None) -> None:
        self.cfg, self.system, self.run_dir = cfg, system, run_dir
        self.train_tasks, self.eval_tasks = tasks
        self.fleet = RolloutFleet(system, cfg.rollout, cfg.sync.timeout_s)
        self.scaler = ElasticScaler(system, self.fleet) if cfg.rollout.fleet == "elastic" else None
        self.feeder = PromptFeeder(system.buffer, self.train_tasks, cfg.data.seed, cfg.rollout,
                                   cfg.algorithm.dynamic_sampling)
        self.watch = RewardWatch(system.rewards, cfg.reward, run_dir, cfg.rollout.queue_check_s, system.reward_models,
                                 cfg.teacher, system.teachers)
        self.agreements: list[float | None] = []  # the reward model's agreement with the rule, per evaluation
        self.state = state
        self.last_checkpoint = str(run_dir.resume_from) if state else None
        self.last_saved = time.monotonic() if state else None  # a resumed run starts from a checkpoint
        if state is not None:
            self._restore(state)
        self.acc_before = state.eval_accuracy_before if state else self.evaluate()
        self.reporter = StepReporter(run_dir, cfg, (state.wandb_id if state else "") or uuid.uuid4().hex[:12],
                                     cfg.learner.total_steps)
        self.threads = ThreadBudget(system) if not cfg.on_gpu and cfg.learner.threads is None else None
        self.skipped_steps = 0  # steps the learner did not apply: something was not finite
        self.stop_request = StopRequest()  # SIGTERM: checkpoint at the end of the step, then stop
        self.failover = LearnerFailover(system, cfg.learner, lambda refs: self.train(0, refs),
                                        cfg.learner.process_group_timeout_s) if cfg.learner.fails_over else None

    def _restore(self, state: RunState) -> None:
        """The learner (and critic) load the checkpoint, the rollout workers take its weights as its version, its
        finished groups go back into the buffer, its untrained prompts are fed again."""
        s = self.system
        s.learners.load(str(self.run_dir.resume_from / "learner"))
        if s.critics:
            s.critics.load(str(self.run_dir.resume_from / "critic"))
        ray.get(s.broadcaster.publish.remote(state.version))
        finished = checkpoint.load_groups(self.run_dir.resume_from)
        ray.get(s.buffer.restore.remote(self.feeder.restored_groups(finished)))
        self.feeder.restore(state, finished)

    # ---- the step ---------------------------------------------------------------------------------
    def loop(self) -> dict:
        """Steps after the checkpoint (or 1) to learner.total_steps; returns the loop's totals."""
        cfg = self.cfg
        first = self.state.step + 1 if self.state else 1
        samples = self.state.samples if self.state else 0
        self.feeder.feed_for(first - 1)
        self.fleet.start()
        if self.failover:
            self.failover.start(first - 1)
        t_loop, loop_samples, eval_s = time.perf_counter(), 0, 0.0
        for step in range(first, cfg.learner.total_steps + 1):
            t0 = time.perf_counter()
            refs = self.next_batch(step)
            t1 = time.perf_counter()
            stats, synced, t2 = self.learner_step(step, refs)
            t3 = time.perf_counter()
            if cfg.placement.mode == "colocate":
                stats.update(self.fleet.sync_report())
            self.feeder.feed_for(step)
            samples, loop_samples = samples + stats["samples"], loop_samples + stats["samples"]
            rec = {"step": step, **stats, "reward_failures": self.watch.check(), **self.watch.step_usage(),
                   "sampled_reward_mean": self.feeder.sampled_reward(stats["reward_mean"], stats["samples"]),
                   "wait_s": t1 - t0, "train_s": t2 - t1, "sync_s": synced.seconds, "sync_pause_s": synced.pause_s,
                   **{f"sync_{k}": v for k, v in synced.hold.items()}, "step_s": t3 - t0,
                   "samples_per_s": loop_samples / (t3 - t_loop), "fleet_size": len(self.fleet.workers),
                   **(self.scaler.counts() if self.scaler else {})}
            if cfg.eval.every_steps and step % cfg.eval.every_steps == 0 and step < cfg.learner.total_steps:
                t_eval = time.perf_counter()
                rec["eval_accuracy"] = self.evaluate()
                if self.agreements:
                    rec["eval_model_agreement"] = self.agreements[-1]
                eval_s += time.perf_counter() - t_eval
            rec["elapsed_s"] = time.perf_counter() - t_loop - eval_s  # training time, evaluations left out
            self.reporter.step(rec, synced, sum(self.fleet.restarts))
            if self.checkpoint_due(step) or self.stop_request:
                self.failing_over(step, lambda: self.save_checkpoint(step, samples))
            if self.failover:
                self.failover.trained_step(step, refs, stats)
            if self.stop_request and step < cfg.learner.total_steps:
                raise RunStopped(f"stopped by signal {self.stop_request.signal} after step {step}; checkpoint "
                                 f"{self.last_checkpoint}; run the same command again (checkpoint.resume=auto) "
                                 "to continue", exit_code=128 + self.stop_request.signal)
        return {"samples": samples, "loop_s": time.perf_counter() - t_loop, "eval_s": eval_s,
                "steps": cfg.learner.total_steps - first + 1}

    def learner_step(self, step: int, refs: list) -> tuple[dict, object, float]:
        """Train, then the rollout workers and buffer move to the learner's step; the stats, the sync and when
        training ended."""
        def both():
            stats = self.train(step, refs)
            return stats, self.fleet.sync(), time.perf_counter()
        return self.failing_over(step, both)

    def failing_over(self, step: int, fn):
        """fn(); with learner failover, a rank that died re-forms its group and fn runs again."""
        while True:
            try:
                return fn()
            except LearnerFailed as err:
                if self.failover is None:
                    raise
                self.failover.recover(err, step)

    def evaluate(self) -> float:
        """Held-out accuracy; reward failures are watched while it runs (it scores through the reward actors).
        With a reward model, its agreement with the rule on the held-out samples is kept."""
        accuracy, samples = self.fleet.evaluate(self.eval_tasks, self.cfg.eval, self.watch.check_due,
                                                self.cfg.rollout.queue_check_s)
        if self.system.reward_models:
            self.agreements.append(agreement(samples, self.cfg.reward.model.kind))
        return accuracy

    def look_at_the_fleet(self) -> None:
        """Dead workers come back (or, joined ones, leave); rollout.fleet=elastic: nodes drained, nodes with room."""
        self.fleet.heal()
        if self.scaler:
            self.scaler.check()

    def next_batch(self, step: int) -> list[list[ray.ObjectRef]]:
        """The buffer's next batch (list-wrapped refs) in stream order. While waiting: rollout workers that died
        are brought back, prompts topped up, and reward failures checked (a failing reward stops the run, never
        starves it)."""
        ref = self.system.buffer.get_batch.remote(self.cfg.rollout.batch_size)
        if self.scaler:
            self.scaler.check()
        while not ray.wait([ref], timeout=0)[0]:
            ready, _ = ray.wait([ref, *self.feeder.low_prompts(), *self.fleet.loops], num_returns=1,
                                timeout=self.cfg.rollout.queue_check_s)
            self.look_at_the_fleet()
            self.feeder.top_up_if_low()
            self.watch.check_due()  # whatever woke the wait: a failing reward must stop the run, not starve it
        try:
            items = sorted(ray.get(ref), key=lambda item: stream_position(item[1].task_id))
        except NoProgress as err:  # the buffer's watch: its own message, without the actor's traceback around it
            raise NoProgress(f"{err.cause}; the run stopped at step {step}") from None
        metas = [meta for _, meta in items]
        self.feeder.trained([m.task_id for m in metas])
        self.reporter.batch(step, metas)
        return [wrapped for wrapped, _ in items]

    def train(self, step: int, refs: list) -> dict:
        """The policy step (and the critic's, for ppo); colocated, the engines sleep around it. A step the learner
        could not apply (non-finite) is counted, or stops the run with learner.nonfinite=stop."""
        s, colocated = self.system, self.cfg.placement.mode == "colocate"
        t0 = time.perf_counter()
        asleep = self.fleet.sleep() if colocated else {}
        t1 = time.perf_counter()
        threads = self.threads.next() if self.threads else self.cfg.learner.threads
        if s.critics is None:
            result = s.learners.train(refs, threads=threads)
        else:
            values = s.critics.values(refs)
            result = s.learners.train(refs, values, threads)
            if not result.stats.get("skipped"):
                result.stats.update(s.critics.train(refs, result.returns, values))
        stats = result.stats
        if self.threads:
            self.threads.trained()
        if colocated:
            t2 = time.perf_counter()
            s.learners.release()
            stats.update(mem_generate_gb=asleep["mem_generate_gb"], mem_asleep_gb=asleep["mem_asleep_gb"],
                         sleep_s=t1 - t0, release_s=time.perf_counter() - t2)
        if threads is not None:
            stats["learner_threads"] = threads
        if stats.get("skipped"):
            self.skipped_steps += 1
            log.warning("step %d skipped: non-finite %s", step, stats["skipped"])
            if self.cfg.learner.nonfinite == "stop":
                raise RunStopped(f"step {step}: non-finite {stats['skipped']}, the update was not applied "
                                 "(learner.nonfinite=stop)", exit_code=1)
        return stats

    def checkpoint_due(self, step: int) -> bool:
        """checkpoint.every_steps when set (0: never); otherwise after the run's first step, then every
        checkpoint.every_minutes (time suits long runs: their steps take seconds to minutes)."""
        c = self.cfg.checkpoint
        if c.every_steps is not None:
            return c.every_steps > 0 and step % c.every_steps == 0
        return self.last_saved is None or time.monotonic() - self.last_saved >= 60 * c.every_minutes

    def save_checkpoint(self, step: int, samples: int) -> None:
        """Learner (and critic) state into a temporary directory, then the buffer's finished groups and the
        driver's state, the manifest, the rename."""
        s, root = self.system, self.run_dir.checkpoints
        tmp = checkpoint.begin(root, step)
        s.learners.save(str(tmp / "learner"))
        if s.critics:
            s.critics.save(str(tmp / "critic"))
        version = ray.get(s.broadcaster.current_version.remote())
        fed, pending = self.feeder.run_state_part()
        items, ledger = ray.get(s.buffer.snapshot.remote())
        groups = with_images(get_groups([place for place, _ in items]))  # the bytes themselves: refs die with the run
        state = RunState(step, version, fed, pending, samples, self.acc_before, ledger, self.reporter.wandb_id)
        self.last_checkpoint = str(checkpoint.commit(tmp, root, state, groups, self.cfg.checkpoint.keep))
        self.last_saved = time.monotonic()
