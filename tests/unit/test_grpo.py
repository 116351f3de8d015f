import math

import pytest
import torch

from rayrl.algorithms import group_advantages, grpo_loss, kl_k3, token_mean
from rayrl.config import AlgorithmConfig


def test_group_advantages_by_hand():
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0])
    groups = torch.tensor([0, 0, 0, 0, 1, 1])
    adv = group_advantages(rewards, groups, std_normalize=True, eps=0.0)
    # group 0: mean .25, population std sqrt(.1875) = .4330; group 1: all equal -> 0 (0/0 guarded by eps)
    s = math.sqrt(0.1875)
    assert torch.allclose(adv[:4], torch.tensor([0.75 / s, -0.25 / s, -0.25 / s, -0.25 / s]))
    adv = group_advantages(rewards, groups, std_normalize=True, eps=1e-6)
    assert torch.allclose(adv[4:], torch.zeros(2))
    centred = group_advantages(rewards, groups, std_normalize=False, eps=1e-6)
    assert torch.allclose(centred, torch.tensor([0.75, -0.25, -0.25, -0.25, 0.0, 0.0]))


def _loss(logp, behav, prox, adv, **cfg):
    mask = torch.ones_like(logp)
    return grpo_loss(logp, behav, prox, adv, mask, AlgorithmConfig(**cfg))


def test_ppo_clip_by_hand():
    logp = torch.log(torch.tensor([[1.5, 0.9]]))
    zero = torch.zeros_like(logp)
    # ratios 1.5 and 0.9; clip to [0.8, 1.2]; A=+1 -> max(-1.5,-1.2)=-1.2, max(-0.9,-0.9)=-0.9
    loss, stats = _loss(logp, zero, zero, torch.tensor([1.0]))
    assert loss.item() == pytest.approx(-1.05)
    assert stats["clip_frac"] == pytest.approx(0.5)
    # A=-1 -> max(1.5,1.2)=1.5, max(.9,.9)=.9
    loss, _ = _loss(logp, zero, zero, torch.tensor([-1.0]))
    assert loss.item() == pytest.approx(1.2)


def test_decoupled_importance_weight_and_cap_by_hand():
    logp = torch.log(torch.tensor([[1.5, 0.9]]))
    prox = torch.zeros_like(logp)
    behav = torch.log(torch.tensor([[0.5, 1.0]]))  # behaviour weights exp(prox-behav) = [2, 1]
    loss, stats = _loss(logp, behav, prox, torch.tensor([1.0]), behav_imp_weight_cap=5.0)
    assert loss.item() == pytest.approx((-1.2 * 2 - 0.9) / 2)
    assert stats["behav_weight_mean"] == pytest.approx(1.5)
    loss, _ = _loss(logp, behav, prox, torch.tensor([1.0]), behav_imp_weight_cap=1.5)  # token 0 dropped
    assert loss.item() == pytest.approx(-0.9)
    # without the correction the behaviour policy is PPO's old policy: ratios [3, .9] -> [-1.2, -.9]
    loss, _ = _loss(logp, behav, prox, torch.tensor([1.0]), off_policy_correction=False)
    assert loss.item() == pytest.approx(-1.05)


def test_gradient_of_unclipped_token():
    logp = torch.zeros(1, 2, requires_grad=True)
    loss, _ = _loss(logp, torch.zeros(1, 2), torch.zeros(1, 2), torch.tensor([2.0]))
    loss.backward()
    assert torch.allclose(logp.grad, torch.tensor([[-1.0, -1.0]]))  # -A * ratio / n_tokens


def test_kl_k3_and_beta():
    logp, ref = torch.log(torch.tensor([[0.5]])), torch.log(torch.tensor([[0.25]]))
    assert kl_k3(logp, ref).item() == pytest.approx(0.5 + math.log(2) - 1)
    assert kl_k3(logp, logp).item() == 0.0
    mask = torch.ones_like(logp)
    loss, stats = grpo_loss(logp, logp, logp, torch.tensor([0.0]), mask, AlgorithmConfig(beta=0.1), ref_logp=ref)
    assert loss.item() == pytest.approx(0.1 * (0.5 + math.log(2) - 1))
    with pytest.raises(ValueError, match="reference"):
        grpo_loss(logp, logp, logp, torch.tensor([0.0]), mask, AlgorithmConfig(beta=0.1))


def test_token_mean_ignores_masked_tokens():
    values = torch.tensor([[1.0, 100.0], [3.0, 5.0]])
    mask = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    assert token_mean(values, mask).item() == pytest.approx(3.0)
