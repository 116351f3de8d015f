import math

import pytest
import torch

from rayrl.algorithms import group_advantages, kl_k3, policy_loss, token_mean
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


def _loss(logp, behav, prox, adv, ref=None, **cfg):
    """One sequence per row, every token scored, token-mean aggregation; adv [B] per sequence."""
    weights = torch.ones_like(logp)
    seq_ids = torch.arange(logp.shape[0]).unsqueeze(1).expand_as(logp)
    return policy_loss(logp, behav, prox, adv.unsqueeze(1).expand_as(logp), weights, AlgorithmConfig(**cfg),
                       weights.sum(), seq_ids, ref)


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
    assert loss.item() == pytest.approx(-0.9 / 2)  # a dropped token still counts in the denominator
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
    loss, stats = _loss(logp, logp, logp, torch.tensor([0.0]), ref, beta=0.1)
    assert loss.item() == pytest.approx(0.1 * (0.5 + math.log(2) - 1))
    with pytest.raises(ValueError, match="reference"):
        _loss(logp, logp, logp, torch.tensor([0.0]), beta=0.1)


def test_token_mean_ignores_masked_tokens():
    values = torch.tensor([[1.0, 100.0], [3.0, 5.0]])
    mask = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    assert token_mean(values, mask).item() == pytest.approx(3.0)


def test_every_advantage_estimator_by_hand():
    from rayrl.algorithms import advantages

    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.5])
    groups = torch.tensor([0, 0, 0, 0, 1, 1, 2])  # group 1: identical rewards; group 2: a single sample
    mask = torch.ones(7, 1)  # one token each: the per-token advantage is the sequence's

    def advantages_of(cfg):
        adv, returns = advantages(rewards, groups, mask, cfg)
        assert returns is None
        return adv.squeeze(1)

    grpo = advantages_of(AlgorithmConfig(type="grpo", advantage_std_eps=1e-6))
    s = math.sqrt(0.1875)
    assert torch.allclose(grpo, torch.tensor([0.75 / s, -0.25 / s, -0.25 / s, -0.25 / s, 0, 0, 0]), atol=1e-5)
    dr = advantages_of(AlgorithmConfig(type="DR-GRPO"))  # the alias
    assert torch.allclose(dr, torch.tensor([0.75, -0.25, -0.25, -0.25, 0, 0, 0]))
    rloo = advantages_of(AlgorithmConfig(type="rloo"))
    # 1 - mean(0,0,0) = 1; 0 - mean(1,0,0) = -1/3; group 1: 1 - 1 = 0; a group of one: 0
    assert torch.allclose(rloo, torch.tensor([1.0, -1 / 3, -1 / 3, -1 / 3, 0, 0, 0]))
    rpp = advantages_of(AlgorithmConfig(type="REINFORCE++", advantage_std_eps=1e-9))
    mean = 3.5 / 7
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards.tolist()) / 7)
    assert torch.allclose(rpp, (rewards - mean) / std, atol=1e-6)


def test_dr_grpo_divides_by_a_constant_per_sample():
    from rayrl.engines.learner.microbatch import MicroBatch

    mask = torch.tensor([[0, 1, 1, 0, 0, 1]]).float()  # a packed row: sequences of 3 and 3 tokens
    ids = torch.zeros(1, 6, dtype=torch.long)
    mb = MicroBatch(ids, ids, None, mask, mask, None, None, mask, ids, cu_seqlens=torch.tensor([0, 3, 6], dtype=torch.int32))
    assert mb.n_sequences == 2
    padded = MicroBatch(ids.view(2, 3), ids.view(2, 3), None, torch.tensor([[0, 1, 1], [0, 0, 0]]).float(), mask,
                        None, None, mask, ids.view(2, 3))
    assert padded.n_sequences == 1


def test_clip_higher_and_dual_clip_by_hand():
    logp = torch.log(torch.tensor([[1.5, 0.5, 4.0]]))
    zero = torch.zeros_like(logp)
    # A=+1, clip to [0.8, 1.28]: -min(1.5, 1.28), -min(.5, .8)... PPO takes max of the negated terms
    loss, _ = _loss(logp, zero, zero, torch.tensor([1.0]), clip_eps_high=0.28)
    assert loss.item() == pytest.approx((-1.28 - 0.5 - 1.28) / 3)
    # A=-1: per token max(r, clip(r)) = [1.5, .8, 4.0]; dual clip 3 caps the last at 3
    loss, _ = _loss(logp, zero, zero, torch.tensor([-1.0]), dual_clip=3.0)
    assert loss.item() == pytest.approx((1.5 + 0.8 + 3.0) / 3)


def test_truncated_and_banded_importance_weights_by_hand():
    logp = torch.zeros(1, 3)
    prox = torch.zeros(1, 3)
    behav = torch.log(torch.tensor([[0.25, 1.0, 4.0]]))  # weights exp(prox - behav) = [4, 1, .25]
    # truncate at 2: weights [2, 1, .25], every token kept; A=+1, ratio 1 -> per token -w
    loss, stats = _loss(logp, behav, prox, torch.tensor([1.0]), behav_imp_weight_mode="truncate",
                        behav_imp_weight_cap=2.0)
    assert loss.item() == pytest.approx(-(2 + 1 + 0.25) / 3) and stats["correction_frac"] == pytest.approx(1 / 3)
    # mask outside [.5, 2]: only the middle token stays
    loss, stats = _loss(logp, behav, prox, torch.tensor([1.0]), behav_imp_weight_cap=2.0, behav_imp_weight_floor=0.5)
    assert loss.item() == pytest.approx(-1.0 / 3) and stats["correction_frac"] == pytest.approx(2 / 3)
