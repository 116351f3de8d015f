"""ActorSystem: every role of a run as Ray actor handles, placed by the placement plan. The public way to wire
rayrl's actors in a program of one's own (recipes/custom_loop.py); the trainer's loop uses it the same way.

    system = ActorSystem(cfg, models=prepare_models(cfg))   # starts or joins Ray, creates the actors
    system.buffer.feed.remote(tasks)             # prompts in; rollout workers pull them while .run() loops
    batch = ray.get(system.buffer.get_batch.remote(n))
    stats = system.learners.train([refs for refs, _meta in batch])
    synced = ray.get(system.broadcaster.sync.remote())   # rollout workers and buffer move to the learner's step
    system.close()
"""

from __future__ import annotations

import os

import ray

from rayrl.actors import (CriticGroup, Gateway, LearnerGroup, RewardActor, RewardModelActor, RolloutWorker,
                          TeacherActor, TrajectoryBuffer, WeightBroadcaster)
from rayrl.checkpoint import RunState
from rayrl.config import Config
from rayrl.data import PromptTemplate
from rayrl.demo import ModelPaths
from rayrl.driver.ray_cluster import start_ray
from rayrl.driver.worker_table import RolloutTable
from rayrl.faults import RolloutFailed, wait_all
from rayrl.models.tokenizer import load_tokenizer
from rayrl.placement import PlacementPlan
from rayrl.progress import ProgressLimits


class ActorSystem:
    """Roles: buffer, reward actors and reward models, gateway (agent workflows), rollout workers, learner group,
    broadcaster and, for algorithm.type=ppo, a critic group. Names (rollout-0, buffer, ...) live in a namespace of the run."""

    def __init__(self, cfg: Config, run_name: str = "rayrl", state: RunState | None = None,
                 models: ModelPaths | None = None) -> None:
        """models: the policy's and reward model's directories (rayrl.demo.prepare_models builds the demo ones;
        None: the paths the config names). state: a checkpoint's run state; the buffer continues its ledger and the
        broadcaster its version. If a role cannot be created, what was created is stopped and the error raised."""
        models = models or ModelPaths.given(cfg)
        self.cfg, self.namespace = cfg, f"rayrl-{run_name}"
        self.placement = PlacementPlan(cfg, name=self.namespace)
        self.started_ray = start_ray(cfg.scheduler, self.placement.total_cpus)
        self.buffer = self.gateway = self.learners = self.broadcaster = self.critics = self.reward_model_path = None
        self.rewards, self.reward_models, self.teachers, self.gateway_url = [], [], [], ""
        self.rollout_table = RolloutTable([])  # the rollout workers; the RolloutFleet changes it from here on
        try:
            self.model_path, self.reward_model_path = models.policy, models.reward_model
            self.placement.create()
            self.tokenizer = load_tokenizer(self.model_path)
            self.template_ref = ray.put(PromptTemplate(self.tokenizer))  # the gateway's (a rollout worker loads its own)
            self._services(state)
            self._workers(state.version if state else 0)
        except BaseException:
            self.close()
            raise

    def _workers(self, version: int) -> None:
        """Rollout workers, learner ranks, the broadcaster that joins them, and the critic (ppo)."""
        cfg = self.cfg
        self.rollout_table = RolloutTable([self.rollout_worker(i) for i in range(cfg.rollout.num_workers)])
        if self.gateway:
            ray.get(self.gateway.set_workers.remote(self.rollouts))
        if cfg.placement.mode != "split" and cfg.on_gpu:  # vLLM sizes its memory pools before the learner allocates
            wait_all([w.health.remote() for w in self.rollouts], self.rollout_names, "starting the rollout engines",
                     cfg.rollout.restart_timeout_s, RolloutFailed)
        self.learners = LearnerGroup(cfg, self.model_path, self.placement, namespace=self.namespace)
        self.broadcaster = WeightBroadcaster.options(**self._options("broadcaster", "service")).remote(
            cfg, self.learners, self.rollouts, self.buffer, version)
        self.weight_sync = ray.get(self.broadcaster.setup.remote())  # tensors, bytes, buckets
        self.critics = CriticGroup(cfg, self.model_path, self.tokenizer.pad_token_id, self.placement,
                                   self.namespace) if cfg.algorithm.type == "ppo" else None

    def _services(self, state: RunState | None) -> None:
        """The buffer, the reward actors and (agent workflows) the gateway, in the service bundle."""
        cfg = self.cfg
        self.buffer = TrajectoryBuffer.options(**self._options("buffer", "service")).remote(
            cfg.rollout.batch_size, cfg.rollout.max_staleness, state.version if state else 0,
            state.ledger if state else None, cfg.algorithm.dynamic_sampling,
            ProgressLimits.of(cfg.rollout, cfg.reward, cfg.teacher))
        r, m, t = cfg.reward, cfg.reward.model, cfg.teacher
        names = [f"reward-model-{i}" for i in range(m.num_actors)] if self.reward_model_path is not None else []
        self.reward_models = self._served(names, "reward_model", m, "starting the reward models", lambda i: (
            cfg, self.reward_model_path, i, self.placement.threads("reward_model"), [os.getcwd()]), RewardModelActor)
        teachers = [f"teacher-{i}" for i in range(t.num_actors)] if t.enabled else []
        self.teachers = self._served(teachers, "teacher", t, "starting the teachers", lambda i: (
            t, cfg.rollout.temperature, cfg.on_gpu, i, self.placement.threads("teacher"), cfg.vllm), TeacherActor)
        models, teachers = names or [None], teachers or [None]  # reward actors are restartable: peers by name
        self.rewards = [RewardActor.options(**self._options(f"reward-{i}", "service"), max_restarts=r.max_restarts,
                                            max_task_retries=r.max_restarts, max_concurrency=r.max_threads)
                        .remote(cfg, i, [os.getcwd()], models[i % len(models)], self.namespace,
                                teachers[i % len(teachers)])
                        for i in range(r.num_actors)]
        wants = cfg.agent.wants_gateway(cfg.rollout.workflow)
        self.gateway = Gateway.options(**self._options("gateway", "service")).remote(cfg, self.template_ref, []) \
            if wants else None
        self.gateway_url = ray.get(self.gateway.start.remote()) if self.gateway else ""

    def _served(self, names: list[str], role: str, section, what: str, args, actor_cls) -> list:
        """The actors serving a frozen model (reward models, teachers), restartable, each started and answering."""
        actors = [actor_cls.options(**self._options(name, role, i), max_restarts=section.max_restarts,
                                    max_task_retries=section.max_restarts).remote(*args(i))
                  for i, name in enumerate(names)]
        wait_all([a.health.remote() for a in actors], names, what, self.cfg.rollout.restart_timeout_s)
        return actors

    @property
    def rollouts(self) -> list:
        """The rollout workers' handles now (a copy: the fleet's table changes as workers come and go)."""
        return self.rollout_table.handles

    @property
    def rollout_names(self) -> list[str]:
        return self.rollout_table.names

    def _peer_names(self) -> tuple:
        """The buffer, reward actors and gateway by name: a restartable worker's constructor takes no handle."""
        return ("buffer", [f"reward-{i}" for i in range(len(self.rewards))], "gateway" if self.gateway else None)

    def rollout_worker(self, index: int):
        """Rollout worker `index`, restartable (rollout.max_restarts): a restart reruns this constructor."""
        buffer, rewards, gateway = self._peer_names()
        return RolloutWorker.options(**self._options(f"rollout-{index}", "rollout", index),
                                     max_restarts=self.cfg.rollout.max_restarts).remote(
            index, self.cfg, self.model_path, buffer, rewards, self.placement.threads("rollout"), gateway,
            self.gateway_url, [os.getcwd()], self.namespace)

    def elastic_rollout_worker(self, index: int, node_id: str):
        """Rollout worker `index` on a node that joined the cluster (rollout.fleet=elastic); not restarted in place:
        when its node goes, it goes, and a new one joins where capacity returns."""
        worker = RolloutWorker.options(name=f"rollout-{index}", namespace=self.namespace, max_restarts=0,
                                       **self.placement.elastic_rollout_options(node_id)).remote(
            index, self.cfg, self.model_path, self.buffer, self.rewards,
            self.placement.threads("rollout"), self.gateway, self.gateway_url, [os.getcwd()])
        return worker

    def _options(self, name: str, role: str, index: int = 0) -> dict:
        return {"name": name, "namespace": self.namespace, **self.placement.actor_options(role, index)}

    @property
    def actors(self) -> list:
        """Every actor handle created so far (the learner and critic ranks included)."""
        groups = [g.workers for g in (self.learners, self.critics) if g is not None]
        singles = [a for a in (self.buffer, self.gateway, self.broadcaster) if a is not None]
        return [*singles, *self.reward_models, *self.teachers, *self.rewards, *self.rollout_table.every_handle(),
                *(w for g in groups for w in g)]

    def close(self) -> None:
        """Stop vLLM's engine processes first, then every actor, the placement group, and Ray if we started it."""
        engines = self.rollout_table.every_handle()
        if engines:
            ray.wait([w.shutdown.remote() for w in engines], num_returns=len(engines), timeout=20)
        for a in self.actors:
            ray.kill(a)
        self.placement.remove()
        if self.started_ray:
            ray.shutdown()
