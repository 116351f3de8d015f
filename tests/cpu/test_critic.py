"""PPO's critic as a second learner group on FSDP2 (gloo, 2 ranks) beside the policy's: the trainer's
step (critic values -> policy step -> critic step on the returns) fits the value loss on a fixed batch,
and a saved critic resumes to the same values."""

from __future__ import annotations

import ray
import torch

from rayrl.actors import CriticGroup, LearnerGroup
from rayrl.demo import prepare_models
from rayrl.placement import PlacementPlan


def test_critic_fits_returns_and_resumes(ray_cluster, make_cfg, random_groups, tmp_path):
    cfg = make_cfg("algorithm.type=ppo", "learner.backend=fsdp", "learner.num_workers=2", "algorithm.critic_lr=1e-3",
                   "algorithm.value_clip=10.0")
    model_path = prepare_models(cfg).policy
    items = [[ray.put(g)] for g in random_groups(4, 4, seed=5)]
    plan = PlacementPlan(cfg, name="critic-a", learner_only=True)
    plan.create()
    learners, critic = LearnerGroup(cfg, model_path, plan), CriticGroup(cfg, model_path, 0, plan)
    try:
        losses = []
        for _ in range(6):
            values = critic.values(items)  # one ref per rank: rank r's shard, items[r::2]
            returns = learners.train(items, values).returns
            for r, (ret, val) in enumerate(zip(ray.get(returns), ray.get(values))):  # each rank got its own shard
                shard = [ray.get(i[0]) for i in items[r::2]]
                assert set(ret) == set(val) == {g.task.id for g in shard}
                assert all(isinstance(t, torch.Tensor) and len(t) == len(s.completion_ids)
                           for g in shard for t, s in zip(ret[g.task.id], g.samples))
            losses.append(critic.train(items, returns, values)["critic_loss"])
        assert losses[-1] < 0.5 * losses[0], losses
        critic.save(str(tmp_path / "critic"))
        expected = _flat(critic.values(items))
    finally:
        learners.kill()
        critic.kill()
        plan.remove()
    plan = PlacementPlan(cfg, name="critic-b", learner_only=True)
    plan.create()
    resumed = CriticGroup(cfg, model_path, 0, plan)
    try:
        resumed.load(str(tmp_path / "critic"))
        assert torch.equal(_flat(resumed.values(items)), expected)
    finally:
        resumed.kill()
        plan.remove()


def _flat(value_refs) -> torch.Tensor:
    """Every rank's values, in rank, task and sample order, as one tensor."""
    return torch.cat([t for part in ray.get(value_refs) for k in sorted(part) for t in part[k]])
