"""On-policy distillation's parts without Ray: the advantage mixes the task reward's and the teacher's per-token
signal by their coefficients, the loss is the sum of both terms' losses (either dropped, the sum breaks), a batch
carries the teacher's log-probs only when every sample has them, the teacher of the policy itself scores its tokens
exactly as the learner does, wrong teacher answers leave samples unscored, and a teacher with another tokenizer is
refused before Ray starts."""

from __future__ import annotations

import asyncio

import pytest
import torch

from rayrl import components
from rayrl.algorithms.distill import reverse_kl, with_teacher
from rayrl.batching import collate
from rayrl.config import AlgorithmConfig, ConfigError
from rayrl.demo import prepare_models
from rayrl.engines.teacher.hf import HFTeacher
from rayrl.preflight import check_teacher
from rayrl.rewards import teacher_scores
from rayrl.rewards.combine import unscored


@pytest.fixture(scope="module")
def model_path(make_cfg):
    return prepare_models(make_cfg("demo.warmup_steps=20")).policy


def test_the_advantage_weighs_the_task_and_the_teacher_by_their_coefficients():
    task, teacher, behav = torch.tensor([[0.5, 0.5, 0.0]]), torch.tensor([[-1.0, -3.0, 0.0]]), torch.tensor([[-2.0, -1.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    mixed = with_teacher(task, teacher, behav, mask, AlgorithmConfig(reward_coef=2.0, distill_coef=0.5))
    assert mixed.tolist() == [[2 * 0.5 + 0.5 * 1.0, 2 * 0.5 + 0.5 * -2.0, 0.0]]
    assert reverse_kl(teacher, behav, mask) == pytest.approx((-1.0 + 2.0) / 2)


def test_the_mixed_loss_is_the_sum_of_the_reward_and_the_teacher_losses(make_cfg, model_path, random_groups):
    """At ratio 1 (behaviour log-probs the learner's own) the policy loss is linear in the advantage: the mixed
    config's first loss equals the reward-only and teacher-only losses added, and neither of them is zero."""
    losses = {}
    for name, coefs in {"mixed": (1.0, 1.0), "reward": (1.0, 0.0), "teacher": (0.0, 1.0)}.items():
        cfg = make_cfg("teacher.enabled=true", f"teacher.path={model_path}", f"algorithm.reward_coef={coefs[0]}",
                       f"algorithm.distill_coef={coefs[1]}", "algorithm.dynamic_sampling=false")
        learner = components.learner(cfg, model_path)
        groups = random_groups(4, 4, seed=7, same_prompt=True)
        batch = collate(groups, learner.tokenizer.pad_token_id)
        with torch.no_grad():
            batch.behav_logprobs = learner.compute_logprobs(batch) * batch.loss_mask  # exactly on-policy
        batch.teacher_logprobs = (batch.behav_logprobs + torch.linspace(-1, 0.5, batch.loss_mask.shape[1])) \
            * batch.loss_mask
        losses[name] = learner.train_step(batch)["loss"]
    assert abs(losses["reward"]) > 1e-3 and abs(losses["teacher"]) > 1e-3, losses
    assert losses["mixed"] == pytest.approx(losses["reward"] + losses["teacher"], abs=1e-5), losses


def test_a_distilling_learner_refuses_a_batch_without_teacher_log_probs(make_cfg, model_path, random_groups):
    cfg = make_cfg("teacher.enabled=true", f"teacher.path={model_path}", "algorithm.dynamic_sampling=false")
    learner = components.learner(cfg, model_path)
    with pytest.raises(ValueError, match="no teacher log-probs"):
        learner.train_step(collate(random_groups(2, 4, seed=1), learner.tokenizer.pad_token_id))


def test_the_batch_carries_teacher_log_probs_only_when_every_sample_has_them(random_groups):
    groups = random_groups(2, 3, seed=2)
    samples = [s for g in groups for s in g.samples]
    for s in samples[:-1]:
        s.teacher_logprobs = [-0.5] * len(s.completion_ids)
    assert collate(groups, 0).teacher_logprobs is None
    samples[-1].teacher_logprobs = [-0.25] * len(samples[-1].completion_ids)
    batch = collate(groups, 0)
    assert torch.equal(batch.teacher_logprobs != 0, batch.loss_mask > 0)  # aligned with the completion tokens
    assert batch.teacher_logprobs[batch.loss_mask > 0].tolist()[-1] == -0.25


@pytest.mark.parametrize("same_prompt", [True, False], ids=["groups share their prompt", "a prompt per sample"])
def test_the_teacher_of_the_policy_itself_scores_its_tokens_as_the_learner_does(make_cfg, model_path, random_groups,
                                                                                same_prompt):
    learner = components.learner(make_cfg(), model_path)
    teacher = HFTeacher(model_path, learner.setup.temperature, on_gpu=False, max_batch_tokens=40)  # several forwards
    groups = random_groups(3, 4, seed=4, same_prompt=same_prompt)
    scores = asyncio.run(teacher.score(teacher_scores.requests_for(groups)))
    teacher_scores.apply(groups, scores)
    batch = collate(groups, learner.tokenizer.pad_token_id)
    with torch.no_grad():
        ours = learner.compute_logprobs(batch)[batch.loss_mask > 0]
    assert torch.allclose(batch.teacher_logprobs[batch.loss_mask > 0], ours, atol=1e-5)


def test_wrong_teacher_answers_leave_the_samples_unscored_naming_the_teacher(random_groups):
    groups = random_groups(2, 2, seed=5)
    first = groups[0].samples[0]
    scores = [[-1.0] * len(s.completion_ids) for g in groups for s in g.samples]
    scores[0] = scores[0][:-1]  # one log-prob short
    scores[1] = [float("nan")] * len(groups[0].samples[1].completion_ids)
    teacher_scores.apply(groups, scores)
    assert first.reward_status == "teacher_error" and first.teacher_logprobs is None
    assert "returned" in first.reward_reason and f"for {len(first.completion_ids)} tokens" in first.reward_reason
    assert groups[0].samples[1].reward_reason == "teacher_error: the teacher returned a non-finite log-prob"
    assert unscored(groups[0]).startswith("2 samples without a teacher score; first: teacher_error:")
    assert unscored(groups[1]) is None and all(s.teacher_logprobs == [-1.0] * len(s.completion_ids)
                                               for s in groups[1].samples)
    teacher_scores.apply(groups, scores[:1])
    assert all(s.reward_status == "teacher_error" for g in groups for s in g.samples)


def test_a_teacher_with_another_tokenizer_is_refused_before_ray_starts(make_cfg, tmp_path):
    from rayrl.models.tokenizer import TEXT_CHARS
    from rayrl.testing.random_qwen2 import save_random_qwen2

    other = save_random_qwen2(tmp_path / "other", chars=TEXT_CHARS, hidden_size=32, intermediate_size=64,
                              num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1)
    cfg = make_cfg("teacher.enabled=true", f"teacher.path={other}", "algorithm.dynamic_sampling=false")
    with pytest.raises(ConfigError, match="has another tokenizer than model.path the demo policy's") as err:
        check_teacher(cfg)
    assert str(other) in str(err.value) and "same vocabulary" in str(err.value)
