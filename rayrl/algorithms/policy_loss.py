"""The policy loss: PPO clip (clip-higher, dual clip) on a token ratio or GSPO's sequence ratio,
against the proximal policy with behaviour importance weights masked or truncated per token or per
sequence (decoupled PPO, MIS, TIS); KL to a reference and an entropy bonus; weighted aggregation."""

from __future__ import annotations

import torch

from rayrl.algorithms.aggregation import per_sequence
from rayrl.algorithms.kl import KL_ESTIMATORS
from rayrl.config import AlgorithmConfig


def token_mean(values: torch.Tensor, mask: torch.Tensor, denom: float | None = None) -> torch.Tensor:
    """Sum over every masked token / number of tokens (or denom)."""
    total = mask.sum() if denom is None else torch.tensor(float(denom))
    return (values * mask).sum() / total.clamp(min=1.0)


def _ratio(logp: torch.Tensor, old: torch.Tensor, mask: torch.Tensor, seq_ids: torch.Tensor | None,
           cfg: AlgorithmConfig) -> torch.Tensor:
    """Token ratio p / old; gspo: the sequence's geometric-mean ratio as each token's value, with the
    gradient of the token's own log-prob (GSPO-token form, equal to GSPO's gradient)."""
    if cfg.type != "gspo":
        return torch.exp(logp - old)
    if seq_ids is None:
        raise ValueError("algorithm.type=gspo needs sequence ids per token")
    seq_log_ratio = per_sequence(logp - old, seq_ids, mask, mean=True)
    return torch.exp(seq_log_ratio.detach() + logp - logp.detach())


def _behaviour_weights(prox_logp, behav_logp, mask, seq_ids, cfg) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(weights, mask with dropped tokens removed, tokens masked or truncated) of exp(prox - behav)."""
    log_w = (prox_logp - behav_logp).detach()
    if cfg.behav_imp_weight_level == "sequence":
        if seq_ids is None:
            raise ValueError("algorithm.behav_imp_weight_level=sequence needs sequence ids per token")
        log_w = per_sequence(log_w, seq_ids, mask, mean=False)
    w = log_w.clamp(max=60.0).exp()  # a product over a long sequence must not overflow to inf
    below = w < cfg.behav_imp_weight_floor  # masked in both modes: truncate with a floor combines TIS and MIS
    if cfg.behav_imp_weight_mode == "mask":
        outside = (w > cfg.behav_imp_weight_cap) | below
        return w, mask * (~outside).float(), outside
    return w.clamp(max=cfg.behav_imp_weight_cap), mask * (~below).float(), (w > cfg.behav_imp_weight_cap) | below


def policy_loss(logp: torch.Tensor, behav_logp: torch.Tensor, prox_logp: torch.Tensor, advantages: torch.Tensor,
                weights: torch.Tensor, cfg: AlgorithmConfig, denom: float, seq_ids: torch.Tensor | None = None,
                ref_logp: torch.Tensor | None = None, entropy: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Per-token tensors [R, L]; weights: each token's aggregation weight (0 off the scored tokens).
    Returns (sum of weighted per-token losses / denom, stats as detached 0-d tensors: reading them is the
    caller's one host sync, after the step's work is queued)."""
    mask = (weights > 0).float()
    old = prox_logp if cfg.off_policy_correction else behav_logp
    ratio = _ratio(logp, old, mask, seq_ids, cfg)
    low, high = cfg.clip_range()
    clipped = torch.clamp(ratio, 1.0 - low, 1.0 + high)
    per_token = torch.maximum(-advantages * ratio, -advantages * clipped)
    if cfg.dual_clip is not None:  # a negative advantage on a very large ratio: bounded loss
        per_token = torch.where(advantages < 0, torch.minimum(per_token, -cfg.dual_clip * advantages), per_token)
    scored, behav_w, stats = mask, torch.ones_like(logp), {}
    if cfg.off_policy_correction:
        behav_w, mask, touched = _behaviour_weights(prox_logp, behav_logp, mask, seq_ids, cfg)
        per_token = per_token * behav_w
        stats["correction_frac"] = token_mean(touched.float(), scored).detach()  # tokens masked or truncated
    if cfg.beta > 0 and not cfg.kl_in_reward:
        if ref_logp is None:
            raise ValueError("algorithm.beta > 0 needs reference log-probs")
        kl = KL_ESTIMATORS[cfg.kl_estimator](logp, ref_logp)
        per_token = per_token + cfg.beta * kl
        stats["kl"] = token_mean(kl.detach(), mask)
    if cfg.entropy_coef > 0:
        if entropy is None:
            raise ValueError("algorithm.entropy_coef > 0 needs token entropies")
        per_token = per_token - cfg.entropy_coef * entropy
    if entropy is not None:
        stats["entropy"] = token_mean(entropy.detach(), scored)
    loss = (per_token * weights * mask).sum() / max(float(denom), 1e-8)
    with torch.no_grad():
        stats["clip_frac"] = token_mean(((ratio - clipped).abs() > 0).float(), mask).detach()
        stats["behav_weight_mean"] = token_mean(behav_w, mask).detach()
    return loss, stats
