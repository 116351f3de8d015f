"""The policy loss: PPO clip (clip-higher, dual clip) against the proximal policy, behaviour importance
weights masked or truncated (decoupled PPO, MIS, TIS), optional k3 KL to a frozen reference."""

from __future__ import annotations

import torch

from rayrl.config import AlgorithmConfig


def token_mean(values: torch.Tensor, mask: torch.Tensor, denom: float | None = None) -> torch.Tensor:
    """Token-level aggregation: sum over every masked token / number of tokens (or denom)."""
    total = mask.sum() if denom is None else torch.tensor(float(denom))
    return (values * mask).sum() / total.clamp(min=1.0)


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Schulman's k3 estimator of KL(policy || reference), per token, always >= 0."""
    log_ratio = ref_logp - logp
    return log_ratio.exp() - log_ratio - 1.0


def grpo_loss(logp: torch.Tensor, behav_logp: torch.Tensor, prox_logp: torch.Tensor,
              advantages: torch.Tensor, mask: torch.Tensor, cfg: AlgorithmConfig,
              ref_logp: torch.Tensor | None = None, denom: float | None = None
              ) -> tuple[torch.Tensor, dict[str, float]]:
    """Per-token tensors [B, T]; advantages [B] or per token [B, T]. Returns (loss, stats).

    PPO clip to [1 - clip_eps, 1 + clip_eps_high], optionally dual-clipped. With off_policy_correction
    the ratio is taken against the proximal policy and each token is weighted by exp(prox - behav),
    masked outside [floor, cap] or truncated at cap; without it the behaviour policy is PPO's old one.
    """
    adv = advantages if advantages.dim() == logp.dim() else advantages.unsqueeze(1).expand_as(logp)
    old = prox_logp if cfg.off_policy_correction else behav_logp
    ratio = torch.exp(logp - old)
    high = cfg.clip_eps if cfg.clip_eps_high is None else cfg.clip_eps_high
    clipped = torch.clamp(ratio, 1.0 - cfg.clip_eps, 1.0 + high)
    per_token = torch.maximum(-adv * ratio, -adv * clipped)
    if cfg.dual_clip is not None:  # a negative advantage on a very large ratio: bounded loss
        per_token = torch.where(adv < 0, torch.minimum(per_token, -cfg.dual_clip * adv), per_token)
    mask = mask.float()
    scored = mask
    behav_w = torch.ones_like(logp)
    stats = {}
    if cfg.off_policy_correction:
        behav_w = torch.exp(prox_logp - behav_logp).detach()
        if cfg.behav_imp_weight_mode == "mask":
            outside = (behav_w > cfg.behav_imp_weight_cap) | (behav_w < cfg.behav_imp_weight_floor)
            mask = mask * (~outside).float()
        else:
            outside = behav_w > cfg.behav_imp_weight_cap
            behav_w = behav_w.clamp(max=cfg.behav_imp_weight_cap)
        per_token = per_token * behav_w
        stats["correction_frac"] = token_mean(outside.float(), scored).item()  # tokens masked or truncated
    if cfg.beta > 0:
        if ref_logp is None:
            raise ValueError("algorithm.beta > 0 needs reference log-probs")
        kl = kl_k3(logp, ref_logp)
        per_token = per_token + cfg.beta * kl
        stats["kl"] = token_mean(kl.detach(), mask).item()
    loss = token_mean(per_token, mask, denom)
    with torch.no_grad():
        stats["clip_frac"] = token_mean(((ratio - clipped).abs() > 0).float(), mask).item()
        stats["behav_weight_mean"] = token_mean(behav_w, mask).item()
    return loss, stats
