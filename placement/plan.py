"""Turn the config into one placement group with a bundle per compute role instance.

split:    one bundle per rollout worker (tensor_parallel_size bundles for a vLLM worker with TP > 1)
          and per learner rank, plus one service bundle.
colocate: rollout worker i and learner rank i share bundle i (each takes half of it, and on a GPU they
          take turns: the trainer puts the rollout engine to sleep while the learner trains).
share:    the same bundles as colocate, but both run at once (asynchronous RL on one device); with
          placement.rollouts_per_gpu = k, rollout workers k*i .. k*i+k-1 share bundle i with learner rank i
          (the learner takes half of its GPU, each rollout worker 1/(2k)).
The service bundle holds the reward actors, buffer and broadcaster; reward model actors (reward.model) and
teachers (teacher) get bundles of their own or grow the rollout workers' (their placement key). With algorithm.type=ppo, critic rank
i shares learner rank i's bundle: each takes half of the learner's share.
A vLLM worker with TP > 1 holds no GPU itself: vLLM's Ray executor places its TP workers on the
worker's bundles (VLLM_RAY_BUNDLE_INDICES), inside this placement group.
"""

from __future__ import annotations

import math

import ray
from ray.util.placement_group import placement_group, placement_group_table, remove_placement_group
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy, PlacementGroupSchedulingStrategy

from rayrl.config import Config, ServedModelConfig


def _bundle(cpus: float, gpus: float) -> dict[str, float]:
    return {"CPU": cpus, "GPU": gpus} if gpus else {"CPU": cpus}


class PlacementPlan:
    def __init__(self, cfg: Config, name: str = "rayrl", learner_only: bool = False,
                 rollout_only: bool = False) -> None:
        """learner_only / rollout_only: bundles for that role and the service bundle alone (benchmarks, checks)."""
        self.cfg, self.name = cfg, name
        r, l, p = cfg.rollout, cfg.learner, cfg.placement
        if learner_only:
            r = r.model_copy(update={"num_workers": 0})
        if rollout_only:
            l = l.model_copy(update={"num_workers": 0})
        gpu = 1.0 if cfg.cluster.n_gpus_per_node > 0 else 0.0
        self.tp = cfg.vllm.tensor_parallel_size if cfg.rollout.engine == "vllm" else 1
        self.slots: dict[str, list[int]] = {}
        self.share = {"rollout": r.cpus_per_worker, "learner": l.cpus_per_worker, "service": 0.0}
        self.gpus = {"rollout": gpu, "learner": gpu, "service": 0.0}
        if p.mode == "split":
            n_roll = r.num_workers * self.tp
            self.bundles = [_bundle(r.cpus_per_worker, gpu)] * n_roll + [_bundle(l.cpus_per_worker, gpu)] * l.num_workers
            self.slots["rollout"] = list(range(0, n_roll, self.tp))  # each worker's first bundle
            self.slots["learner"] = list(range(n_roll, n_roll + l.num_workers))
            if self.tp > 1:
                self.gpus["rollout"] = 0.0
        else:  # the config's rules hold: one device per vLLM worker, rollout workers paired with learner ranks
            if learner_only or rollout_only:
                raise ValueError(f"placement.mode={p.mode} pairs every rollout worker with a learner rank: a plan of "
                                 "one role (learner_only, rollout_only) needs placement.mode=split")
            k = p.rollouts_per_gpu if p.mode == "share" else 1
            self.bundles = [_bundle(k * r.cpus_per_worker + l.cpus_per_worker, gpu)] * l.num_workers
            self.slots["rollout"] = [b for b in range(l.num_workers) for _ in range(k)]
            self.slots["learner"] = list(range(l.num_workers))
            self.gpus = {"rollout": gpu / (2 * k), "learner": gpu / 2, "service": 0.0}
        if cfg.algorithm.type == "ppo":
            self.slots["critic"] = self.slots["learner"]
            for k in (self.share, self.gpus):
                k["learner"] = k["critic"] = k["learner"] / 2
        self.bundles = [dict(b) for b in self.bundles]
        if cfg.reward.model.kind != "none":
            self._served("reward_model", cfg.reward.model, gpu)
        if cfg.teacher.enabled:
            self._served("teacher", cfg.teacher, gpu)
        self.slots["service"] = [len(self.bundles)]
        self.bundles.append({"CPU": p.service_cpus})
        self.labels: list[dict[str, str]] = [{} for _ in self.bundles]
        for role, labels in (("rollout", p.rollout_node_labels), ("learner", p.learner_node_labels)):
            for first in self.slots[role]:
                for b in range(first, first + (self.tp if role == "rollout" else 1)):
                    self.labels[b] = self.labels[b] | labels  # colocated bundles need both roles' labels
        self.group = None

    def _served(self, role: str, m: ServedModelConfig, gpu: float) -> None:
        """A served model's actors (reward.model, teacher). placement=own: a bundle per actor; rollout: actor i inside
        rollout worker i's bundle, which grows by its CPUs and hands it gpu_fraction of the worker's GPU share."""
        gpus = m.gpu_fraction if gpu else 0.0
        self.share[role], self.gpus[role] = m.cpus, gpus
        if m.placement == "own":
            first = len(self.bundles)
            self.bundles += [_bundle(m.cpus, gpus) for _ in range(m.num_actors)]
            self.slots[role] = list(range(first, first + m.num_actors))
            return
        self.slots[role] = self.slots["rollout"][:m.num_actors]
        self.gpus["rollout"] -= gpus
        for b in self.slots[role]:
            self.bundles[b]["CPU"] += m.cpus

    @property
    def total_cpus(self) -> int:
        return math.ceil(sum(b["CPU"] for b in self.bundles))

    def create(self) -> None:
        timeout_s = self.cfg.placement.ready_timeout_s
        selector = self.labels if any(self.labels) else None
        self.group = placement_group(self.bundles, strategy=self.cfg.placement.strategy, name=self.name,
                                     bundle_label_selector=selector)
        ready, _ = ray.wait([self.group.ready()], timeout=timeout_s)
        if not ready:
            remove_placement_group(self.group)
            raise RuntimeError(f"placement group {self.bundles} could not be placed within {timeout_s}s; "
                               f"cluster has {ray.available_resources()}. Lower rollout/learner "
                               "num_workers or cpus_per_worker")
        self._sort_by_node()

    def _sort_by_node(self) -> None:
        """Order each role's bundles by node so rank r lands on the same node across restarts."""
        nodes = placement_group_table(self.group).get("bundles_to_node_id", {})
        for role in ("rollout", "learner"):
            self.slots[role] = sorted(self.slots[role], key=lambda b: (nodes.get(b, ""), b))
        if "critic" in self.slots:
            self.slots["critic"] = self.slots["learner"]

    def nodes(self) -> dict[str, list[str]]:
        """Each role's node ids, one per actor (the run summary shows where everything ran)."""
        where = placement_group_table(self.group).get("bundles_to_node_id", {})
        return {role: [where.get(b, "") for b in slots] for role, slots in self.slots.items()}

    def actor_options(self, role: str, index: int = 0) -> dict:
        slots = self.slots[role]
        first = slots[index % len(slots)]
        tp_rollout = role == "rollout" and self.tp > 1
        options = {
            "num_cpus": self.share[role],
            "num_gpus": self.gpus[role],
            "scheduling_strategy": PlacementGroupSchedulingStrategy(
                self.group, placement_group_bundle_index=first, placement_group_capture_child_tasks=tp_rollout),
        }
        if tp_rollout:  # vLLM's Ray executor puts its TP workers on these bundles of this group
            bundles = ",".join(str(b) for b in range(first, first + self.tp))
            # vLLM's engine-core process calls ray.init() with no address: without RAY_ADDRESS it starts a
            # second, empty cluster where this placement group does not exist
            options["runtime_env"] = {"env_vars": {"VLLM_RAY_BUNDLE_INDICES": bundles,
                                                   "RAY_ADDRESS": ray.get_runtime_context().gcs_address}}
        return options

    def elastic_rollout_options(self, node_id: str) -> dict:
        """A rollout worker that joins a running job (rollout.fleet=elastic): outside the placement group, pinned
        to a node that appeared, with a rollout bundle's resources."""
        return {"num_cpus": self.share["rollout"], "num_gpus": self.gpus["rollout"],
                "scheduling_strategy": NodeAffinitySchedulingStrategy(node_id, soft=False)}

    def threads(self, role: str) -> int:
        """Torch threads for an actor of this role: its CPU share, at least one."""
        return max(1, int(self.share[role]))

    def remove(self) -> None:
        if self.group is not None:
            remove_placement_group(self.group)
            self.group = None
