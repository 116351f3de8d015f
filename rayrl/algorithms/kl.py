"""Per-token estimators of KL(policy || reference) from the two log-probs of the sampled token."""

from __future__ import annotations

import torch


def kl_k1(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """log p - log ref: unbiased, can be negative per token."""
    return logp - ref_logp


def kl_k2(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """(log p - log ref)^2 / 2: low variance, >= 0; its gradient is that of the reverse KL."""
    return 0.5 * (logp - ref_logp) ** 2


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Schulman's k3, ref/p - 1 - log(ref/p): unbiased and always >= 0."""
    log_ratio = ref_logp - logp
    return log_ratio.exp() - log_ratio - 1.0


KL_ESTIMATORS = {"k1": kl_k1, "k2": kl_k2, "k3": kl_k3}
