"""The driver every recipe uses: check the config, start or join Ray and create the run's actors, run the
asynchronous step (rayrl.driver.run_loop), evaluate before and after, write the run directory."""

from __future__ import annotations

import logging
import time

import ray

from rayrl import checkpoint, logs
from rayrl.config import Config
from rayrl.demo import prepare_models
from rayrl.driver.actor_system import ActorSystem
from rayrl.driver.run_directory import RunDirectory
from rayrl.driver.failover import CopiesLost
from rayrl.driver.run_loop import RunLoop
from rayrl.faults import LearnerFailed, RunStopped
from rayrl.placement.storage import check_shared
from rayrl.preflight import preflight

log = logging.getLogger("rayrl")


class Trainer:
    """One training job. __init__ checks what it can before Ray starts (the config's files, functions and the
    checkpoint directory); run() creates the actors and trains to learner.total_steps."""

    def __init__(self, cfg: Config, tasks=None) -> None:
        """tasks: (train, held-out) lists of your own Task objects (images included) in place of data.*'s."""
        logs.configure(cfg.metrics.log_level)
        self.tasks = preflight(cfg, tasks)  # before Ray starts and before any model is built; (train, held-out)
        self.cfg = cfg
        self.run_dir = RunDirectory(cfg.metrics, cfg.checkpoint)

    def run(self) -> dict:
        """Train, evaluate, export, and return the summary (also written as summary.json). A learner rank whose
        in-memory copy died with it (learner failover) starts the run again from its last checkpoint."""
        t_start, fallbacks = time.perf_counter(), []
        while True:
            try:
                return self._run(t_start, fallbacks)
            except CopiesLost as err:
                fallbacks.append(self._fall_back(err))

    def _run(self, t_start: float, fallbacks: list[dict]) -> dict:
        state = self.run_dir.begin(self.cfg)
        system = ActorSystem(self.cfg, self.run_dir.name, state, prepare_models(self.cfg))
        try:
            check_shared(self.run_dir.checkpoints)  # with several nodes: one directory every node sees
            run = RunLoop(self.cfg, system, self.run_dir, self.tasks, state)
            try:
                totals = run.loop()
            except CopiesLost:
                run.reporter.close()  # the next attempt truncates its logs to the checkpoint
                raise
            except Exception as err:
                raise self._stopped(system, run.last_checkpoint, err) or err
            finally:
                run.stop_request.uninstall()
            return self._finish(system, run, totals, t_start, fallbacks)
        finally:
            system.close()

    def _fall_back(self, err: CopiesLost) -> dict:
        """The run's newest checkpoint becomes where it continues from; one message says which steps are lost."""
        newest = checkpoint.find_resume("auto", self.run_dir.checkpoints)
        if newest is None:
            raise RunStopped(f"{err}; no checkpoint was written to fall back to (checkpoint.every_steps / "
                             "every_minutes): the run stopped") from err
        self.run_dir.resume_from = newest
        step = checkpoint.load_state(newest).step
        log.warning("%s: falling back to the checkpoint %s; the steps after %d are lost and trained again", err,
                    newest, step)
        return {"cause": str(err), "checkpoint": str(newest), "checkpoint_step": step}

    @staticmethod
    def _stopped(system, last_checkpoint: str | None, err: Exception) -> RunStopped | None:
        """A learner rank or the buffer that died stops the run in one line naming it and where to resume."""
        dead = system.learners.dead_ranks()
        if dead:
            who = f"learner rank {', '.join(map(str, dead))} died"
        elif isinstance(err, LearnerFailed):
            who = str(err)
        elif not _alive(system.buffer):
            who = "the trajectory buffer died (the actor that holds the prompt queue and the finished groups)"
        else:
            return None
        where = (f"the last checkpoint is {last_checkpoint}; run again with checkpoint.resume=auto to continue from "
                 "it" if last_checkpoint else "no checkpoint was written (checkpoint.every_steps=0)")
        return RunStopped(f"{who} ({type(err).__name__}); the run stopped: {where}")

    def _finish(self, system, run: RunLoop, totals: dict, t_start: float, fallbacks: list[dict]) -> dict:
        cfg, fleet = self.cfg, run.fleet
        worker_totals, ledger = fleet.stop()
        acc_after = run.evaluate()
        if cfg.checkpoint.save_final:
            system.learners.save(str(self.run_dir.path / "final"))
        n = max(1, totals["steps"])
        summary = {
            "eval_accuracy_before": run.acc_before, "eval_accuracy_after": acc_after, "steps": cfg.learner.total_steps,
            "samples": totals["samples"], "wall_s": time.perf_counter() - t_start, "loop_s": totals["loop_s"],
            "step_s_mean": totals["loop_s"] / n, "eval_s": totals["eval_s"],
            "resumed_from": str(self.run_dir.resume_from or ""),
            "generation_s_per_step": worker_totals["gen_s"] / n / max(1, len(system.rollouts)),
            "groups": ledger, "unused_groups": ledger["unused"], "rollout_restarts": fleet.restarts,
            "rollout_recoveries": fleet.recoveries, "fleet": run.scaler.summary() if run.scaler else {},
            "reward_failures": run.watch.check(),
            "mismatch": run.reporter.mismatch_summary(), "workflow": worker_totals["workflow"],
            "gateway": ray.get(system.gateway.stats.remote()) if system.gateway else {},
            "aborted_samples": worker_totals["aborted"], "skipped_steps": run.skipped_steps,
            "bad_image_tasks": worker_totals["bad_images"],  # rejected by the rollout: images it could not use
            "learner_recoveries": run.failover.summary() if run.failover else [], "checkpoint_fallbacks": fallbacks,
            "max_staleness": cfg.rollout.max_staleness, "weight_sync": system.weight_sync,
            "prompts_fed": run.feeder.stream.fed,
            "image_puts": run.feeder.image_puts,  # a task's images go into the object store once, not per sample
            "nodes": system.placement.nodes(), "run_dir": str(self.run_dir.path), "model_path": system.model_path,
        }
        if system.reward_models:
            usage = run.watch.usage()
            summary["reward_model"] = {**usage, "path": system.reward_model_path, "agreement": run.agreements,
                                       "engine_calls_per_step": usage["engine_calls"] / n,
                                       "reward_calls_per_step": usage["reward_calls"] / n}
        self.run_dir.write_json("summary.json", summary)
        run.reporter.close(summary)
        return summary


def _alive(actor, timeout_s: float = 5.0) -> bool:
    """The actor answers within timeout_s (a busy one that does not answer counts as alive)."""
    try:
        ray.get(actor.ping.remote(), timeout=timeout_s)
    except ray.exceptions.RayActorError:
        return False
    except ray.exceptions.GetTimeoutError:
        pass
    return True


def train(cfg: Config, tasks=None) -> dict:
    """Run one training job end to end and return its summary; tasks: your own (train, held-out) Task lists in
    place of data.*'s."""
    return Trainer(cfg, tasks).run()
