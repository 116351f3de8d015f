"""RolloutWorker: leases prompts from the buffer and runs the workflow's episodes for them concurrently
(generation and reward in one coroutine, engine calls of all episodes batched together), handing each
scored group to the buffer, which owns it from then on (a dead worker loses no finished group).
Generation and control run in separate concurrency groups, so pause / weight updates are served while
episodes are in flight."""

from __future__ import annotations

import asyncio
import time

import ray
from rayrl import components
from rayrl.actors.engine_use import EngineUse
from rayrl.actors.episode_set import EpisodeSet, episode_or_reject, workflow_stats
from rayrl.actors.peers import peer
from rayrl.actors.reward_scorers import RewardScorers, RewardUnavailable
from rayrl.coalesce import Coalescer
from rayrl.config import Config
from rayrl.data.template import PromptTemplate
from rayrl.engines.device_memory import device_used_gb
from rayrl.image_refs import task_images
from rayrl.metrics import RayMetrics
from rayrl.models.tokenizer import load_tokenizer
from rayrl.rewards.combine import unscored
from rayrl.types import GenerationRequest, GroupMeta, Sample, Task, TrajectoryGroup
from rayrl.workflows.base import EpisodeEngine, Sampling, request_seed


COUNTERS = {"rollout_samples_total": "samples generated", "rollout_tokens_total": "completion tokens",
            "rollout_errors_total": "failed episodes", "rollout_rejected_total": "tasks the workflow rejected",
            "rollout_aborted_total": "samples cut short (request timeout), returned with partial tokens",
            "rollout_starts_total": "times this worker started (more than 1: it was restarted)"}
GAUGES = {"rollout_requests_in_flight": "prompts being generated now", "rollout_version": "policy version held",
          "rollout_episodes_in_flight": "episodes running now"}


# "gen" is left at Ray's own bound for async actors; the engine batches the calls of concurrent episodes
@ray.remote(concurrency_groups={"gen": 1000, "ctrl": 1})
class RolloutWorker:
    def __init__(self, index: int, cfg: Config, model_path: str, buffer, rewards: list, num_threads: int,
                 gateway=None, gateway_url: str = "", search_path: list[str] | None = None,
                 namespace: str | None = None) -> None:
        """Also a restart's: no sync group until it rejoins. buffer, rewards, gateway: handles or names (peers.py)."""
        buffer, gateway = peer(buffer, namespace), peer(gateway, namespace)
        self.index, self.cfg = index, cfg
        template = PromptTemplate(load_tokenizer(model_path))
        self.label = f"rollout-{index}"  # "rollout-0 restart 1" once the driver brought it back
        self.life = 0  # restarts so far, set by the driver: the buffer ignores calls of earlier lives
        self.template, self.buffer = template, buffer
        self.engine = components.rollout_engine(cfg, model_path, num_threads, template.tokenizer)
        self.workflow = components.workflow(cfg, search_path)
        r = cfg.rollout
        max_context = self.engine.max_context or 1 << 30
        common = dict(template=template, max_context=max_context, gateway=gateway, gateway_url=gateway_url,
                      worker=index, images=task_images)
        self.train_engine = EpisodeEngine(self.generate, self._score_to_train,
                                          sampling=Sampling(r.group_size, r.temperature, r.max_new_tokens, r.seed,
                                                            r.ignore_eos), **common)
        self.eval_common = common
        self.stopped, self.joined, self.closing = False, False, False
        self.totals = {"groups": 0, "samples": 0, "tokens": 0, "gen_s": 0.0, "errors": 0, "rejected": 0,
                       "bad_images": 0}
        self.metrics = RayMetrics("rollout", f"rollout-{index}", COUNTERS, GAUGES)
        self.episodes = EpisodeSet(self.metrics)  # episodes running now (generation, reward, hand-over)
        self.metrics.inc("rollout_starts_total")
        self.use = EngineUse(self.metrics, self.totals)  # calls in the engine, in-flight gauge, gen_s, counters
        self.phase_report: dict[str, float] = {}  # the last sleep's and sync's memory and times
        self.hand_over = Coalescer(lambda items: buffer.put_many.remote(index, items, self.life))
        self.score = RewardScorers(rewards, namespace)

    # ---- generation ---------------------------------------------------------------------
    @ray.method(concurrency_group="gen")
    async def generate(self, requests: list[GenerationRequest]) -> list[Sample]:
        """Raw requests in, samples out (no reward, no buffer): episodes, evaluation, benchmarks, the gateway."""
        await self.use.enter(len(requests))
        samples = None
        try:
            samples = await self.engine.generate(requests)
        finally:
            self.use.leave(len(requests), samples)
        return samples

    async def _score_held_out(self, group: TrajectoryGroup) -> TrajectoryGroup:
        self.totals["groups"] += 1
        return await self.score(group, held_out=True)

    async def _score_to_train(self, group: TrajectoryGroup) -> TrajectoryGroup:
        """A group with a sample the reward model could not score is never trained on: it counts as failed."""
        self.totals["groups"] += 1
        group = await self.score(group)
        if why := unscored(group):
            raise RewardUnavailable(why)
        return group

    @ray.method(concurrency_group="gen")
    async def generate_groups(self, tasks: list[Task], n: int, temperature: float) -> list[TrajectoryGroup]:
        """n samples per task, unscored, one engine call (no workflow: the raw single-turn path)."""
        requests = [GenerationRequest(t.id, self.template.encode(t), n, self.cfg.rollout.max_new_tokens,
                                      temperature, seed=request_seed(self.cfg.rollout.seed, t.id),
                                      images=await task_images(t)) for t in tasks]
        samples = await self.generate(requests)
        by_id: dict[str, list] = {t.id: [] for t in tasks}
        for s in samples:
            by_id[s.request_id].append(s)
        return [TrajectoryGroup(t, by_id[t.id]) for t in tasks]

    @ray.method(concurrency_group="gen")
    async def evaluate(self, tasks: list[Task], n: int, temperature: float) -> list[TrajectoryGroup]:
        """The workflow's scored episodes at evaluation settings; tasks it rejects are left out."""
        r = self.cfg.rollout
        engine = EpisodeEngine(self.generate, self._score_held_out,
                               sampling=Sampling(n, temperature, r.max_new_tokens, r.seed), **self.eval_common)
        groups = await asyncio.gather(*(episode_or_reject(self.workflow, engine, t, self.totals, self.label)
                                        for t in tasks))
        return [g for g in groups if g is not None]

    @ray.method(concurrency_group="gen")
    async def run(self) -> dict:
        """Lease prompts (admitted by staleness), an episode each, until stopped; then wait for those running."""
        self.totals["gen_s"] = 0.0  # gen_s counts this loop's time only
        while not self.stopped and self.episodes.error is None:
            tasks = await self.buffer.take.remote(self.index, self.cfg.rollout.groups_per_call, self.life)
            if not tasks:  # the buffer closed
                break
            for task in tasks:
                self.episodes.start(self._episode(task))
        await self.episodes.wait()
        return {**self.totals, **self.engine.stats(), "workflow": workflow_stats(self.workflow)}

    async def _episode(self, task: Task) -> None:
        """One task's episodes; the group goes to the buffer by value (it owns it from then on). Rejected
        (None): counted. Unscorable: counted as failed and generated again. A raise: the prompt is given
        back and the loop stops with the error (never a silently lost prompt). Cut short by shutdown(): nothing
        handed over, the prompt stays leased until the buffer's requeue() gives it back."""
        try:
            group = await episode_or_reject(self.workflow, self.train_engine, task, self.totals, self.label)
        except RewardUnavailable as why:
            await self.buffer.fail.remote(self.index, task.id, str(why), self.life)
            return
        except Exception:
            if self.closing:
                return
            self.totals["errors"] += 1
            self.metrics.inc("rollout_errors_total")
            await self.buffer.requeue.remote(self.index, [task.id], self.life)
            raise
        if self.closing:  # a truncated group is not trained: its prompt goes back to the queue
            return
        if group is None:
            self.totals["rejected"] += 1
            self.metrics.inc("rollout_rejected_total")
            await self.buffer.reject.remote(self.index, task.id, self.life)
            return
        await self.hand_over((group, GroupMeta(task.id, group.min_version, self.label)))

    # ---- control ------------------------------------------------------------------------
    @ray.method(concurrency_group="ctrl")
    def stop(self) -> None:
        self.stopped = True

    @ray.method(concurrency_group="ctrl")
    def stats(self) -> dict:
        return {**self.totals, "busy_s": self.use.busy_s(), "version": self.engine.version, **self.engine.stats(),
                "gpu_ids": ray.get_gpu_ids(), "workflow": workflow_stats(self.workflow)}

    @ray.method(concurrency_group="ctrl")
    async def pause(self) -> None:
        """Hold generation; in-flight requests are kept and continue on resume()."""
        await self.engine.pause()

    @ray.method(concurrency_group="ctrl")
    async def resume(self) -> None:
        await self.engine.resume()

    @ray.method(concurrency_group="ctrl")
    async def sleep(self) -> dict:
        """Colocated: give the device to the learner until the next weight update (running calls finish first)."""
        t0 = time.perf_counter()
        await self.use.drain()
        used = device_used_gb()  # the generate phase's peak: vLLM allocates its pools up front
        await self.engine.sleep(self.cfg.placement.sleep_level)
        self.phase_report = {"mem_generate_gb": used, "mem_asleep_gb": device_used_gb()}
        return {**self.phase_report, "sleep_s": time.perf_counter() - t0}

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
    async def begin_weight_update(self) -> dict[str, float]:
        """Hold generation for a weight update; returns how long that took here and (vLLM) its parts."""
        t0 = time.perf_counter()
        await self.engine.begin_weight_update()
        return {"hold_s": time.perf_counter() - t0, **getattr(self.engine, "last_pause", {})}

    @ray.method(concurrency_group="ctrl")
    async def receive_weights(self, meta, version: int) -> None:
        """Load the sync's weights, then resume as `version` (one call: a sync's last round trip)."""
        entered, t0 = time.time(), time.perf_counter()
        await self.engine.receive_weights(meta)
        t1 = time.perf_counter()
        if not self.use.awake.is_set():  # weights written, the KV cache not back yet
            self.phase_report["mem_sync_gb"] = device_used_gb()
        await self.engine.end_weight_update(version)
        self.phase_report.update(receive_s=t1 - t0, resume_s=time.perf_counter() - t1, entered_at=entered,
                                 left_at=time.time())  # wall clock: the hops to and from this call
        self.use.awake.set()
        self.metrics.set("rollout_version", version)

    @ray.method(concurrency_group="ctrl")
    def sync_report(self) -> dict:
        """Colocated: device memory at the last sleep and sync; the last sync's receive and resume times; ipc:
        how it was written (and the engine RPC's round trip)."""
        receive = getattr(self.engine, "last_receive", None)
        return {**self.phase_report, **(receive() if receive else {})}

    @ray.method(concurrency_group="ctrl")
    def shutdown(self) -> None:
        """Stop the engine (vLLM's engine process with it) before the actor is killed. Episodes it cuts short hand
        nothing over: their prompts stay leased to this worker until the buffer's requeue() gives them back."""
        self.stopped = self.closing = True
        self.engine.shutdown()
