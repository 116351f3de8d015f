"""A step whose advantages, loss or gradients are not finite is not applied: the weights stay, the
version advances, the cause is reported."""

import pytest
import torch

from rayrl.batching import collate
from rayrl import components
from rayrl.demo import prepare_models


@pytest.fixture(scope="module")
def model_path(make_cfg):
    return prepare_models(make_cfg("demo.warmup_steps=20")).policy


def _weights(learner):
    return {n: p.detach().clone() for n, p in learner.backend.model.named_parameters()}


@pytest.mark.parametrize("poison, cause", [("reward", "advantages"), ("behaviour", "loss"), (None, "")])
def test_non_finite_step_is_skipped(make_cfg, model_path, random_groups, poison, cause):
    learner = components.learner(make_cfg("learner.lr=1e-3"), model_path)
    batch = collate(random_groups(2, 4, seed=1), learner.tokenizer.pad_token_id)
    if poison == "reward":
        batch.rewards[0] = float("nan")
    elif poison == "behaviour":  # a NaN behaviour log-prob makes the importance weight, then the loss, NaN
        batch.behav_logprobs[batch.loss_mask > 0] = float("nan")
    before = _weights(learner)
    stats = learner.train_step(batch)
    after = _weights(learner)
    assert stats["skipped"] == cause and learner.version == 1
    changed = any(not torch.equal(before[n], after[n]) for n in before)
    assert changed == (cause == "")
    assert all(torch.isfinite(p).all() for p in after.values())
