"""GAE, the value loss, token returns with KL in the reward, KL estimators, aggregation weights, GSPO's
sequence ratio, sequence-level importance weights, overlong shaping and the entropy head, each against
numbers worked by hand, with the edge cases: a single-token response and an all-masked sequence."""

import math

import pytest
import torch

from rayrl.algorithms import KL_ESTIMATORS, advantages, denominator, gae, policy_loss, token_weights, value_loss
from rayrl.algorithms.advantages import last_token, masked_whiten
from rayrl.algorithms.shaping import overlong_penalty, shape_batch
from rayrl.config import AlgorithmConfig
from rayrl.models.logprob_head import TokenLogprobHead, scoring

# row 0: a prompt token then 3 completion tokens; row 1: a single-token response; row 2: all masked
MASK = torch.tensor([[0.0, 1, 1, 1], [0, 1, 0, 0], [0, 0, 0, 0]])


def test_gae_by_hand():
    values = torch.tensor([[9.0, 0.5, 0.6, 0.8], [9.0, 0.3, 9.0, 9.0], [9.0, 9.0, 9.0, 9.0]])
    rewards = torch.tensor([[0.0, 0, 0, 1], [0, 0, 0, 0], [0, 0, 0, 0]])
    adv, ret = gae(rewards, values, MASK, gamma=1.0, lam=0.5)
    # row 0: deltas d3 = 1 - .8 = .2, d2 = .8 - .6 = .2, d1 = .6 - .5 = .1; A3 = .2, A2 = .2 + .5*.2 = .3,
    # A1 = .1 + .5*.3 = .25; off the mask 0 (values there are ignored)
    assert torch.allclose(adv[0], torch.tensor([0.0, 0.25, 0.3, 0.2]))
    assert torch.allclose(ret[0], torch.tensor([0.0, 0.75, 0.9, 1.0]))
    assert torch.allclose(adv[1], torch.tensor([0.0, -0.3, 0, 0]))  # single token, reward 0: A = 0 - .3
    assert adv[2].abs().sum() == 0 and ret[2].abs().sum() == 0
    adv, _ = gae(rewards, values, MASK, gamma=0.5, lam=1.0)  # discounting: A1 = .5*.5*1 - .5 = -.25
    assert adv[0, 1].item() == pytest.approx(-0.25)


def test_ppo_advantages_put_the_reward_on_the_last_token_and_whiten():
    values = torch.zeros(3, 4)
    adv, ret = advantages(torch.tensor([1.0, 0.0, 5.0]), torch.tensor([0, 0, 1]), MASK,
                          AlgorithmConfig(type="ppo", gae_lambda=1.0, advantage_std_eps=1e-9), values=values)
    assert torch.allclose(last_token(MASK), torch.tensor([[0.0, 0, 0, 1], [0, 1, 0, 0], [0, 0, 0, 0]]))
    assert torch.allclose(ret, torch.tensor([[0.0, 1, 1, 1], [0, 0, 0, 0], [0, 0, 0, 0]]))  # the masked row's 5 is lost
    # returns 1, 1, 1, 0 over the 4 tokens: mean .75, std sqrt(.1875)
    s = math.sqrt(0.1875)
    assert torch.allclose(adv[0, 1:], torch.full((3,), 0.25 / s)) and adv[1, 1].item() == pytest.approx(-0.75 / s)
    with pytest.raises(ValueError, match="critic"):
        advantages(torch.ones(3), torch.zeros(3, dtype=torch.long), MASK, AlgorithmConfig(type="ppo"))


def test_value_loss_clips_around_the_old_values():
    loss, clipped = value_loss(torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 0.0]]), torch.tensor([[2.0, 1.0]]),
                               torch.ones(1, 2), clip=0.5)
    # token 0: plain (1-2)^2 = 1, clipped to .5 -> (.5-2)^2 = 2.25 (larger: taken); token 1: both 1
    assert torch.allclose(loss, torch.tensor([[1.125, 0.5]])) and clipped.tolist() == [[1.0, 0.0]]


def test_reinforce_pp_charges_kl_per_token_and_grpo_per_sequence():
    kl = torch.tensor([[0.0, 0.1, 0.2, 0.3], [0, 0.4, 0, 0], [0, 0, 0, 0]])
    cfg = AlgorithmConfig(type="reinforce_pp", beta=1.0, kl_in_reward=True, advantage_std_eps=1e-9)
    adv, _ = advantages(torch.tensor([1.0, 0.0, 0.0]), torch.tensor([0, 1, 2]), MASK, cfg, kl=kl)
    returns = torch.tensor([1 - 0.6, 1 - 0.5, 1 - 0.3, -0.4])  # rewards to go, minus the KL still to come
    assert torch.allclose(adv[MASK > 0], (returns - returns.mean()) / returns.std(unbiased=False), atol=1e-6)
    # grpo: the sequence reward minus its summed KL, normalised within the group (rows 0 and 1)
    adv, _ = advantages(torch.tensor([1.0, 0.0, 0.0]), torch.tensor([0, 0, 1]), MASK,
                        AlgorithmConfig(type="grpo", beta=1.0, kl_in_reward=True, advantage_std_eps=1e-9, std_normalize=False), kl=kl)
    assert adv[0, 1].item() == pytest.approx(0.4)  # rewards .4 and -.4, group mean 0
    assert adv[1, 1].item() == pytest.approx(-0.4)
    assert adv[2].abs().sum() == 0


def test_kl_estimators_by_hand():
    logp, ref = torch.tensor([math.log(0.5)]), torch.tensor([math.log(0.25)])
    assert KL_ESTIMATORS["k1"](logp, ref).item() == pytest.approx(math.log(2))
    assert KL_ESTIMATORS["k2"](logp, ref).item() == pytest.approx(0.5 * math.log(2) ** 2)
    assert KL_ESTIMATORS["k3"](logp, ref).item() == pytest.approx(0.5 - 1 + math.log(2))


def test_aggregation_weights_and_denominators():
    groups = torch.tensor([0, 0, 1])
    assert torch.equal(token_weights(MASK, groups, "token_mean"), MASK)
    seq = token_weights(MASK, groups, "seq_mean_token_mean")
    assert torch.allclose(seq[0, 1:], torch.full((3,), 1 / 3)) and seq[1, 1] == 1 and seq[2].sum() == 0
    group = token_weights(MASK, groups, "group_mean_token_mean")  # group 0 holds 4 tokens
    assert torch.allclose(group[:2].sum(), torch.tensor(1.0)) and group[0, 1].item() == pytest.approx(0.25)
    assert denominator(seq.sum().item(), 2, "seq_mean_token_mean", 6) == pytest.approx(2.0)
    assert denominator(4.0, 2, "seq_mean_token_sum_norm", 6) == 12
    # per-token losses 1..: sequence mean of token means = (mean(1,2,3) + 4) / 2
    per_token = torch.tensor([[0.0, 1, 2, 3], [0, 4, 0, 0], [0, 0, 0, 0]])
    assert ((per_token * seq).sum() / seq.sum()).item() == pytest.approx(3.0)
    with pytest.raises(ValueError, match="loss_agg"):
        token_weights(MASK, groups, "per_group")


def _seq_loss(logp, behav, prox, adv, **cfg):
    mask = MASK[:2]
    seq_ids = torch.tensor([[0, 0, 0, 0], [1, 1, -1, -1]])
    weights = token_weights(mask, torch.tensor([0, 1]), AlgorithmConfig(**cfg).aggregation())
    return policy_loss(logp, behav, prox, adv * mask, weights, AlgorithmConfig(**cfg), weights.sum().item(), seq_ids)


def test_gspo_uses_the_sequence_ratio_and_its_gradient():
    logp = torch.tensor([[0.0, 0.3, 0.0, -0.3], [0.0, 0.05, 0.0, 0.0]], requires_grad=True)
    zero = torch.zeros(2, 4)
    adv = torch.tensor([[1.0], [1.0]])
    loss, stats = _seq_loss(logp, zero, zero, adv, type="gspo", clip_eps=0.2)
    # row 0: mean log-ratio 0 -> ratio 1 on every token; row 1: ratio e^.05 = 1.051 within the clip
    assert loss.item() == pytest.approx(-(1.0 + math.exp(0.05)) / 2, abs=1e-6) and stats["clip_frac"] == 0
    loss.backward()
    # d/dlogp_t of -A * s_i averaged per sequence: -s_i / (|y_i| * 2 sequences)
    assert torch.allclose(logp.grad[0, 1:], torch.full((3,), -1 / 6)) and logp.grad[0, 0] == 0
    assert logp.grad[1, 1].item() == pytest.approx(-math.exp(0.05) / 2, abs=1e-6)
    # with its own (tiny) clip range a sequence ratio of e^.05 is clipped: no gradient through it
    loss, stats = _seq_loss(logp.detach(), zero, zero, adv, type="gspo")
    assert loss.item() == pytest.approx(-(1.0 + 1.0004) / 2, abs=1e-6) and stats["clip_frac"] == pytest.approx(0.25)


def test_sequence_level_importance_weights():
    zero = torch.zeros(2, 4)
    behav = torch.tensor([[0.0, -0.5, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0]])  # sequence weights e^.5 and e^-1
    adv = torch.tensor([[1.0], [1.0]])
    loss, stats = _seq_loss(zero, behav, zero, adv, behav_imp_weight_level="sequence", behav_imp_weight_mode="truncate",
                            behav_imp_weight_cap=1.5)
    w0, w1 = 1.5, math.exp(-1)  # e^.5 = 1.65 truncated at 1.5, on all three tokens of row 0
    assert loss.item() == pytest.approx(-(3 * w0 + w1) / 4, abs=1e-6) and stats["correction_frac"] == pytest.approx(0.75)
    loss, stats = _seq_loss(zero, behav, zero, adv, behav_imp_weight_level="sequence", behav_imp_weight_cap=2.0,
                            behav_imp_weight_floor=0.5)  # mask: row 1's weight .37 is outside [.5, 2]
    assert loss.item() == pytest.approx(-(3 * math.exp(0.5)) / 4, abs=1e-6) and stats["correction_frac"] == pytest.approx(0.25)


def test_overlong_penalty_and_filter():
    cfg = AlgorithmConfig(overlong_buffer=4, overlong_penalty=1.0, overlong_filter=True)
    # max_new_tokens 10: no penalty up to 6 tokens, then -1/4 per token, -1 at 10
    assert overlong_penalty(torch.tensor([3, 6, 7, 10]), 10, cfg).tolist() == [0.0, 0.0, -0.25, -1.0]
    assert overlong_penalty(torch.tensor([10]), 10, AlgorithmConfig()).tolist() == [0.0]
    rewards, mask = shape_batch(torch.tensor([1.0, 1.0, 0.0]), MASK, torch.tensor([False, True, False]), 3,
                                AlgorithmConfig(overlong_buffer=2, overlong_filter=True))
    assert rewards.tolist() == [0.0, 1.0, 0.0]  # 3 tokens of 3: -1; 1 token (the buffer starts after it): none
    assert mask[1].sum() == 0 and torch.equal(mask[0], MASK[0])  # the truncated sample leaves the loss


def test_entropy_head_matches_autograd():
    torch.manual_seed(0)
    hidden = torch.randn(5, 8, requires_grad=True)
    head = TokenLogprobHead(8, 11, chunk=2)
    targets = torch.randint(0, 11, (5,))
    with scoring(head, targets, 0.7, entropy=True):
        out = head(hidden)
    (out[:, 0] * torch.arange(5.0)).sum().add((out[:, 1] * 0.3).sum()).backward()
    grads = hidden.grad.clone(), head.weight.grad.clone()
    hidden.grad, head.weight.grad = None, None
    logp = torch.log_softmax(torch.nn.functional.linear(hidden, head.weight) / 0.7, -1)
    ref_lp, ref_ent = logp.gather(-1, targets[:, None]).squeeze(1), -(logp.exp() * logp).sum(-1)
    assert torch.allclose(out[:, 0], ref_lp, atol=1e-5) and torch.allclose(out[:, 1], ref_ent, atol=1e-5)
    (ref_lp * torch.arange(5.0)).sum().add((ref_ent * 0.3).sum()).backward()
    assert torch.allclose(grads[0], hidden.grad, atol=1e-5) and torch.allclose(grads[1], head.weight.grad, atol=1e-5)


def test_entropy_bonus_lowers_the_loss():
    logp, zero, adv = torch.zeros(2, 4), torch.zeros(2, 4), torch.zeros(2, 1)
    ent = torch.full((2, 4), 2.0)
    weights = MASK[:2]
    loss, stats = policy_loss(logp, zero, zero, adv * weights, weights, AlgorithmConfig(entropy_coef=0.1), 4.0,
                              entropy=ent)
    assert loss.item() == pytest.approx(-0.2) and stats["entropy"] == pytest.approx(2.0)


def test_whiten_ignores_masked_entries():
    x = torch.tensor([[100.0, 1.0, 3.0]])
    assert torch.allclose(masked_whiten(x, torch.tensor([[0.0, 1, 1]]), 0.0), torch.tensor([[0.0, -1.0, 1.0]]))


def test_truncation_with_a_floor_combines_tis_and_mis():
    logp = torch.zeros(1, 3)
    behav = torch.log(torch.tensor([[0.25, 1.0, 8.0]]))  # weights exp(0 - behav) = [4, 1, .125]
    weights = torch.ones(1, 3)
    cfg = AlgorithmConfig(behav_imp_weight_mode="truncate", behav_imp_weight_cap=2.0, behav_imp_weight_floor=0.2)
    loss, stats = policy_loss(logp, behav, logp, torch.ones(1, 3), weights, cfg, 3.0)
    # A=+1, ratio 1: token 0 truncated to 2, token 1 kept at 1, token 2 (.125 < .2) masked
    assert loss.item() == pytest.approx(-(2 + 1) / 3) and stats["correction_frac"] == pytest.approx(2 / 3)
