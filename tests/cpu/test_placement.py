"""Placement plans: bundles per role, tensor-parallel rollout bundles, the rollout-only plan."""

import pytest
import ray

from rayrl.config import ConfigError, load_config
from rayrl.placement import PlacementPlan


def test_tensor_parallel_rollout_gets_its_bundles(ray_cluster):
    """A TP=2 vLLM worker: two GPU bundles of the run's group, no GPU of its own, vLLM told which bundles
    and which cluster (its engine process would otherwise start a cluster of its own)."""
    cfg = load_config(None, ["cluster.n_gpus_per_node=4", "rollout.engine=vllm", "rollout.num_workers=2",
                             "vllm.tensor_parallel_size=2", "learner.backend=fsdp", "learner.num_workers=2",
                             "sync.transport=nccl"])
    plan = PlacementPlan(cfg)
    assert [b.get("GPU", 0) for b in plan.bundles] == [1.0] * 6 + [0]
    assert plan.slots["rollout"] == [0, 2] and plan.slots["learner"] == [4, 5]
    second = plan.actor_options("rollout", 1)
    env = second["runtime_env"]["env_vars"]
    assert second["num_gpus"] == 0.0 and env["VLLM_RAY_BUNDLE_INDICES"] == "2,3"
    assert env["RAY_ADDRESS"] == ray.get_runtime_context().gcs_address
    assert second["scheduling_strategy"].placement_group_capture_child_tasks is True
    assert plan.actor_options("learner", 0)["num_gpus"] == 1.0


def test_rollout_only_plan_has_no_learner_bundles():
    """Benchmarks place rollout workers alone: TP bundles plus the service bundle, no learner ranks."""
    cfg = load_config(None, ["cluster.n_gpus_per_node=2", "rollout.engine=vllm", "vllm.tensor_parallel_size=2",
                             "learner.backend=fsdp", "learner.num_workers=2", "sync.transport=nccl"])
    plan = PlacementPlan(cfg, rollout_only=True)
    assert [b.get("GPU", 0) for b in plan.bundles] == [1.0, 1.0, 0]
    assert plan.slots["rollout"] == [0] and plan.slots["learner"] == []
    with pytest.raises(ValueError, match="colocate"):
        PlacementPlan(load_config(None, ["placement.mode=colocate"]), rollout_only=True)


def test_shared_plan_puts_both_roles_in_one_bundle():
    """share: rollout worker i and learner rank i in bundle i, half of its GPU each, as colocate lays them out."""
    cfg = load_config(None, ["placement.mode=share", "cluster.n_gpus_per_node=1", "rollout.engine=vllm",
                             "learner.backend=fsdp", "sync.transport=ipc", "vllm.gpu_memory_utilization=0.4",
                             "learner.gpu_memory_fraction=0.5", "rollout.max_staleness=1"])
    plan = PlacementPlan(cfg)
    assert [b.get("GPU", 0) for b in plan.bundles] == [1.0, 0]
    assert plan.slots["rollout"] == plan.slots["learner"] == [0]
    assert plan.gpus["rollout"] == plan.gpus["learner"] == 0.5
    with pytest.raises(ValueError, match="placement.mode=share pairs every rollout worker with a learner rank"):
        PlacementPlan(cfg, rollout_only=True)


def test_shared_plan_puts_several_rollout_workers_beside_a_learner_rank():
    """placement.rollouts_per_gpu=2: rollout workers 0 and 1 with learner rank 0 in bundle 0, a quarter of its GPU
    each and half to the learner; the bundle holds all three's CPUs; their memory shares must fit together."""
    over = ["placement.mode=share", "cluster.n_gpus_per_node=1", "rollout.engine=vllm", "learner.backend=fsdp",
            "sync.transport=ipc", "learner.gpu_memory_fraction=0.5", "rollout.max_staleness=1",
            "placement.rollouts_per_gpu=2", "rollout.num_workers=2", "rollout.cpus_per_worker=2"]
    plan = PlacementPlan(load_config(None, [*over, "vllm.gpu_memory_utilization=0.2"]))
    assert plan.bundles[0] == {"CPU": 2 * 2 + 1, "GPU": 1.0} and len(plan.bundles) == 2
    assert plan.slots["rollout"] == [0, 0] and plan.slots["learner"] == [0]
    assert plan.gpus["rollout"] == 0.25 and plan.gpus["learner"] == 0.5
    with pytest.raises(ConfigError, match=r"placement.rollouts_per_gpu \(2\) \* vllm.gpu_memory_utilization"):
        load_config(None, [*over, "vllm.gpu_memory_utilization=0.3"])
    with pytest.raises(ConfigError, match="needs rollout.num_workers=2"):
        load_config(None, [*over[:-2], "rollout.num_workers=3", "vllm.gpu_memory_utilization=0.2"])
