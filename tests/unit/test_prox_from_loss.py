"""One optimizer step per batch: the proximal log-probs taken from the loss's own forward (no scoring pass)
give the same update and the same mismatch figures as a separate scoring pass."""

import pytest
import torch

from rayrl.batching import collate
from rayrl import components
from rayrl.demo import prepare_models


@pytest.fixture(scope="module")
def model_path(make_cfg):
    return prepare_models(make_cfg("demo.warmup_steps=20")).policy


def test_proximal_logprobs_from_the_loss_forward_match_a_scoring_pass(make_cfg, model_path, random_groups):
    cfg = make_cfg("learner.lr=1e-3", "learner.max_tokens_per_micro_batch=64")  # several micro-batches
    fused, scored = components.learner(cfg, model_path), components.learner(cfg, model_path)
    assert fused.prox_from_loss
    scored.prox_from_loss = False
    batch = collate(random_groups(4, 4, seed=3), fused.tokenizer.pad_token_id)
    batch.behav_logprobs = batch.behav_logprobs * 0.5  # off the learner's: importance weights matter
    a, b = fused.train_step(batch), scored.train_step(batch)
    assert a["micro_batches"] > 1 and a["mismatch_tokens"] == b["mismatch_tokens"] > 0
    for key in ("loss", "grad_norm", "mismatch_abs_mean", "mismatch_max"):
        assert a[key] == pytest.approx(b[key], rel=1e-6, abs=1e-7), key
    for (name, p), q in zip(fused.backend.model.named_parameters(), scored.backend.model.parameters()):
        assert torch.allclose(p, q, rtol=0, atol=1e-7), name
    assert not components.learner(make_cfg("learner.minibatches=2"), model_path).prox_from_loss
