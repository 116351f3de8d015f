"""PPO's critic as a second learner group on FSDP2 (gloo, 2 ranks) beside the policy's: the trainer's
step (critic values -> policy step -> critic step on the returns) fits the value loss on a fixed batch,
and a saved critic resumes to the same values."""

from __future__ import annotations

import ray

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
            values = critic.values(items)
            returns = learners.train(items, values).returns
            assert set(returns) == set(values) and all(len(r) == 4 for r in returns.values())
            losses.append(critic.train(items, returns, values)["critic_loss"])
        assert losses[-1] < 0.5 * losses[0], losses
        critic.save(str(tmp_path / "critic"))
        expected = critic.values(items)
    finally:
        learners.kill()
        critic.kill()
        plan.remove()
    plan = PlacementPlan(cfg, name="critic-b", learner_only=True)
    plan.create()
    resumed = CriticGroup(cfg, model_path, 0, plan)
    try:
        resumed.load(str(tmp_path / "critic"))
        assert resumed.values(items) == expected
    finally:
        resumed.kill()
        plan.remove()
