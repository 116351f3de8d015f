"""How per-token losses become one number (algorithm.loss_agg): a weight per token fixed over the whole
batch, and a denominator per optimizer step, so that micro-batches and ranks add up to the same loss."""

from __future__ import annotations

import torch


def token_weights(mask: torch.Tensor, group_index: torch.Tensor, mode: str) -> torch.Tensor:
    """[B, T]: token_mean and seq_mean_token_sum_norm 1; seq_mean_token_mean 1 / the sequence's tokens;
    group_mean_token_mean 1 / its group's tokens. 0 off the mask."""
    if mode in ("token_mean", "seq_mean_token_sum_norm"):
        return mask.clone()
    lengths = mask.sum(-1, keepdim=True)
    if mode == "seq_mean_token_mean":
        return mask / lengths.clamp(min=1.0)
    if mode == "group_mean_token_mean":
        n_groups = int(group_index.max()) + 1
        group_tokens = torch.zeros(n_groups).index_add_(0, group_index, lengths.squeeze(1))
        return mask / group_tokens[group_index].clamp(min=1.0).unsqueeze(1)
    raise ValueError(f"unknown algorithm.loss_agg {mode!r}")


def denominator(weight_sum: float, n_sequences: float, mode: str, max_new_tokens: int) -> float:
    """What the step's weighted token sum is divided by: the weights' sum (tokens, sequences or groups),
    or for seq_mean_token_sum_norm (Dr. GRPO) the constant sequences x max_new_tokens."""
    return n_sequences * max_new_tokens if mode == "seq_mean_token_sum_norm" else weight_sum


def per_sequence(values: torch.Tensor, seq_ids: torch.Tensor, mask: torch.Tensor, mean: bool) -> torch.Tensor:
    """Each token gets the sum (or mean) of values over the scored tokens of its sequence (seq_ids:
    a sequence index per token, -1 on padding). Differentiable."""
    ids = seq_ids.clamp(min=0).reshape(-1)
    flat_mask = mask.reshape(-1)
    n = int(ids.max()) + 1 if ids.numel() else 1
    sums = torch.zeros(n, dtype=values.dtype, device=values.device).index_add(0, ids, (values * mask).reshape(-1))
    if mean:
        count = torch.zeros(n, dtype=values.dtype, device=values.device).index_add(0, ids, flat_mask.to(values.dtype))
        sums = sums / count.clamp(min=1.0)
    return sums[ids].view_as(values)
