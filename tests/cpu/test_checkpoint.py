"""Sharded checkpoints: the HF export loads in transformers with the learner's log-probs, and a
resumed group continues exactly where the saved one was."""

from __future__ import annotations

import pytest
import ray
import torch

from rayrl.actors import LearnerGroup
from rayrl.batching import collate
from rayrl.engines.learner.scoring import token_logprobs
from rayrl.demo import prepare_models
from rayrl.models.policy import load_policy
from rayrl.placement import PlacementPlan


@pytest.mark.parametrize("backend", [["learner.backend=fsdp"], ["learner.backend=deepspeed", "learner.zero_stage=3"],
                                     ["learner.backend=torch", "learner.num_workers=1"]],
                         ids=["fsdp2", "deepspeed-zero3", "torch"])
def test_save_export_resume(ray_cluster, make_cfg, random_groups, tmp_path, backend):
    cfg = make_cfg("learner.lr=1e-4", "learner.num_workers=2", "learner.lr_warmup_steps=2", *backend)
    model_path = prepare_models(cfg).policy
    groups = random_groups(4, 4, seed=3)
    items = [[ray.put(g)] for g in groups]

    def group_of(name):
        plan = PlacementPlan(cfg, name=name, learner_only=True)
        plan.create()
        return plan, LearnerGroup(cfg, model_path, plan)

    plan, group = group_of(f"ckpt-a-{backend[0]}")
    try:
        group.train(items)
        group.save(str(tmp_path / "ckpt"))
        expected = group.train(items).stats
        expected_weights = group.full_weights()
    finally:
        group.kill()
        plan.remove()

    exported, tokenizer = load_policy(tmp_path / "ckpt")  # plain transformers, offline
    batch = collate(groups, tokenizer.pad_token_id)
    with torch.no_grad():
        lp = token_logprobs(exported, batch.input_ids, batch.attention_mask, cfg.rollout.temperature)
    assert torch.isfinite(lp).all()

    plan, group = group_of(f"ckpt-b-{backend[0]}")
    try:
        group.load(str(tmp_path / "ckpt"))
        learner_lp = group.completion_logprobs(groups)
        resumed = group.train(items).stats
        resumed_weights = group.full_weights()
    finally:
        group.kill()
        plan.remove()
    ours = torch.tensor([x for row in learner_lp for x in row])
    assert (ours - lp[batch.loss_mask > 0]).abs().max() <= 1e-5  # export == learner state
    assert resumed["loss"] == pytest.approx(expected["loss"], abs=1e-6)
    assert resumed["version"] == expected["version"] == 2
    worst = max((resumed_weights[n] - expected_weights[n]).abs().max().item() for n in expected_weights)
    assert worst <= 1e-6, worst
