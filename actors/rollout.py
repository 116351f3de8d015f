"""RolloutWorker: leases prompts from the buffer, generates, has a reward actor score each group and
hands the scored group to the buffer, which owns it from then on (a dead worker loses no finished
group). Generation and control run in separate concurrency groups, so pause / weight updates are
served while generation is in flight."""

from __future__ import annotations

import asyncio
import time
import zlib

import ray
from rayrl.config import Config
from rayrl.data.template import PromptTemplate
from rayrl.engines.registry import ROLLOUT_ENGINES, resolve
from rayrl.metrics import RayMetrics
from rayrl.types import GenerationRequest, GroupMeta, Sample, Task, TrajectoryGroup


def request_seed(seed: int, task_id: str) -> int:
    """The same task id samples the same way in every run and after a resume."""
    return zlib.crc32(f"{seed}:{task_id}".encode())


# "gen" is left at Ray's own bound for async actors; rollout.max_concurrent_calls limits the engine calls
@ray.remote(concurrency_groups={"gen": 1000, "ctrl": 1})
class RolloutWorker:
    def __init__(self, index: int, cfg: Config, model_path: str, template: PromptTemplate, buffer,
                 rewards: list, num_threads: int) -> None:
        """Also what a restart runs: the engine comes back with model_path's weights and no sync group,
        and generates nothing until the driver has it rejoin and load the current weights."""
        self.index, self.cfg = index, cfg
        self.label = f"rollout-{index}"  # "rollout-0 restart 1" once the driver brought it back
        self.life = 0  # restarts so far, set by the driver: the buffer ignores calls of earlier lives
        self.template, self.buffer, self.rewards = template, buffer, rewards
        engine_cls = resolve(ROLLOUT_ENGINES, cfg.model.backend, "model.backend")
        self.engine = engine_cls(model_path, cfg, num_threads, template.tokenizer)
        self.stopped, self.joined = False, False
        self.scoring: set[asyncio.Task] = set()  # groups being scored and handed to the buffer
        self.scoring_error: BaseException | None = None
        self.calls = asyncio.Semaphore(cfg.rollout.max_concurrent_calls)
        self.totals = {"groups": 0, "samples": 0, "tokens": 0, "gen_s": 0.0, "errors": 0}
        self.metrics = RayMetrics("rollout", f"rollout-{index}", {
            "rollout_samples_total": "samples generated", "rollout_tokens_total": "completion tokens",
            "rollout_errors_total": "failed generation calls",
            "rollout_aborted_total": "samples cut short (request timeout), returned with partial tokens",
            "rollout_starts_total": "times this worker started (more than 1: it was restarted)"},
            {"rollout_requests_in_flight": "prompts being generated now", "rollout_version": "policy version held"})
        self.metrics.inc("rollout_starts_total")
        self.in_flight = 0

    # ---- generation ---------------------------------------------------------------------
    @ray.method(concurrency_group="gen")
    async def generate(self, requests: list[GenerationRequest]) -> list[Sample]:
        """Raw requests in, samples out (no reward, no buffer): evaluation, benchmarks, your own loops."""
        async with self.calls:
            samples = await self.engine.generate(requests)
        self._count(samples)
        return samples

    def _in_flight(self, change: int) -> None:
        self.in_flight += change
        self.metrics.set("rollout_requests_in_flight", self.in_flight)

    def _count(self, samples: list[Sample]) -> None:
        n_tokens = sum(len(s.completion_ids) for s in samples)
        self.totals["samples"] += len(samples)
        self.totals["tokens"] += n_tokens
        self.metrics.inc("rollout_aborted_total", sum(s.finish_reason == "abort" for s in samples))
        self.metrics.inc("rollout_samples_total", len(samples))
        self.metrics.inc("rollout_tokens_total", n_tokens)

    @ray.method(concurrency_group="gen")
    async def generate_groups(self, tasks: list[Task], n: int, temperature: float) -> list[TrajectoryGroup]:
        """n samples per task, unscored, one engine call."""
        requests = [GenerationRequest(t.id, self.template.encode(t), n, self.cfg.rollout.max_new_tokens,
                                      temperature, seed=request_seed(self.cfg.rollout.seed, t.id)) for t in tasks]
        async with self.calls:
            self._in_flight(len(requests))
            try:
                samples = await self.engine.generate(requests)
            finally:
                self._in_flight(-len(requests))
        by_id: dict[str, list] = {t.id: [] for t in tasks}
        for s in samples:
            by_id[s.request_id].append(s)
        self._count(samples)
        return [TrajectoryGroup(t, by_id[t.id]) for t in tasks]

    @ray.method(concurrency_group="gen")
    async def run(self) -> dict:
        """The continuous loop: lease prompts -> generate -> score and hand to the buffer, until stopped."""
        r = self.cfg.rollout
        while not self.stopped and self.scoring_error is None:
            tasks = await self.buffer.take.remote(self.index, r.groups_per_call, self.life)
            if not tasks:  # the buffer closed
                break
            try:
                t0 = time.perf_counter()
                groups = await self.generate_groups(tasks, r.group_size, r.temperature)
                self.totals["gen_s"] += time.perf_counter() - t0  # training rollouts only, not evaluation
            except Exception:
                self.totals["errors"] += 1
                self.metrics.inc("rollout_errors_total")
                await self.buffer.requeue.remote(self.index, [t.id for t in tasks])  # this call's prompts only
                raise
            for g in groups:
                reward = self.rewards[self.totals["groups"] % len(self.rewards)]
                job = asyncio.create_task(self._score_and_hand_over(reward, g))
                self.scoring.add(job)
                job.add_done_callback(self._scored)
                self.totals["groups"] += 1
            if self.scoring_error is not None:
                raise self.scoring_error
        await asyncio.gather(*self.scoring)
        if self.scoring_error is not None:
            raise self.scoring_error
        return {**self.totals, **self.engine.stats()}

    async def _score_and_hand_over(self, reward, group: TrajectoryGroup) -> None:
        """The scored group goes to the buffer by value (the buffer owns it from then on, so it outlives
        this worker); a group the reward actors cannot score, even after restarts, is a counted failure."""
        try:
            scored = await reward.score.remote(group)
        except ray.exceptions.RayError:
            await self.buffer.fail.remote(self.index, group.task.id)
            return
        await self.buffer.put.remote(self.index, scored, GroupMeta(group.task.id, group.min_version, self.label))

    def _scored(self, job: asyncio.Task) -> None:
        self.scoring.discard(job)
        if not job.cancelled() and job.exception() is not None and self.scoring_error is None:
            self.scoring_error = job.exception()  # raised by the loop: never a silently lost group

    # ---- control ------------------------------------------------------------------------
    @ray.method(concurrency_group="ctrl")
    def stop(self) -> None:
        self.stopped = True

    @ray.method(concurrency_group="ctrl")
    def stats(self) -> dict:
        return {**self.totals, "version": self.engine.version, **self.engine.stats(), "gpu_ids": ray.get_gpu_ids()}

    @ray.method(concurrency_group="ctrl")
    async def pause(self) -> None:
        """Hold generation; in-flight requests are kept and continue on resume()."""
        await self.engine.pause()

    @ray.method(concurrency_group="ctrl")
    async def resume(self) -> None:
        await self.engine.resume()

    @ray.method(concurrency_group="ctrl")
    def mark_restart(self, count: int) -> None:
        """Set by the driver after a restart: this worker's groups say which life made them."""
        self.label, self.life = f"rollout-{self.index} restart {count}", count

    @ray.method(concurrency_group="ctrl")
    def health(self) -> dict:
        """joined: in the current weight-sync group (a restarted worker is not, until it rejoins)."""
        return {"joined": self.joined, "version": self.engine.version}

    @ray.method(concurrency_group="ctrl")
    def sync_ranks(self) -> int:
        return self.engine.sync_ranks

    @ray.method(concurrency_group="ctrl")
    async def init_weight_transfer(self, group_info) -> None:
        self.joined = False
        await self.engine.init_weight_transfer(group_info)
        self.joined = True

    @ray.method(concurrency_group="ctrl")
    async def begin_weight_update(self) -> None:
        await self.engine.begin_weight_update()

    @ray.method(concurrency_group="ctrl")
    async def receive_weights(self, meta) -> None:
        await self.engine.receive_weights(meta)

    @ray.method(concurrency_group="ctrl")
    async def end_weight_update(self, version: int) -> None:
        await self.engine.end_weight_update(version)
        self.metrics.set("rollout_version", version)

    @ray.method(concurrency_group="ctrl")
    def shutdown(self) -> None:
        """Stop the engine (vLLM's engine process with it) before the actor is killed."""
        self.engine.shutdown()
