"""Trajectory groups -> padded Batch tensors, and the statistics of a batch before training."""

from __future__ import annotations

import torch

from rayrl.types import Batch, TrajectoryGroup


def collate(groups: list[TrajectoryGroup], pad_id: int) -> Batch:
    """One right-padded row per sample; per-token tensors are aligned to the token they score."""
    rows = [(g, s) for g in groups for s in g.samples]
    width = max(len(s.prompt_ids) + len(s.completion_ids) for _, s in rows)
    shape = (len(rows), width)
    ids = torch.full(shape, pad_id, dtype=torch.long)
    attn = torch.zeros(shape, dtype=torch.long)
    loss_mask = torch.zeros(shape)
    behav = torch.zeros(shape)
    versions = torch.zeros(shape, dtype=torch.long)
    group_index = torch.zeros(len(rows), dtype=torch.long)
    gid = {id(g): i for i, g in enumerate(groups)}
    for b, (g, s) in enumerate(rows):
        p, c = len(s.prompt_ids), len(s.completion_ids)
        ids[b, : p + c] = torch.tensor(s.prompt_ids + s.completion_ids)
        attn[b, : p + c] = 1
        loss_mask[b, p: p + c] = 1.0 if s.loss_mask is None else torch.tensor(s.loss_mask, dtype=torch.float32)
        behav[b, p: p + c] = torch.tensor(s.logprobs)
        versions[b, p: p + c] = torch.tensor(s.versions)
        group_index[b] = gid[id(g)]
    rewards = torch.tensor([s.reward for _, s in rows], dtype=torch.float32)
    truncated = torch.tensor([s.finish_reason == "length" for _, s in rows])
    return Batch(ids, attn, loss_mask, behav, versions, rewards, group_index, truncated)


def completion_values(batch: Batch, values: torch.Tensor, groups: list[TrajectoryGroup]) -> dict[str, list[list[float]]]:
    """A [B, T] tensor as, per task id, each sample's values on its completion tokens (what crosses
    from one learner group to another: the two may shard the groups differently)."""
    out, b = {}, 0
    for g in groups:
        out[g.task.id] = [values[b + i][batch.loss_mask[b + i] > 0].tolist() for i in range(len(g.samples))]
        b += len(g.samples)
    return out


def place_completion_values(batch: Batch, groups: list[TrajectoryGroup], by_task: dict[str, list[list[float]]]
                            ) -> torch.Tensor:
    """The reverse of completion_values: [B, T], 0 off the completion tokens."""
    out, b = torch.zeros_like(batch.loss_mask), 0
    for g in groups:
        for i, vals in enumerate(by_task[g.task.id]):
            out[b + i][batch.loss_mask[b + i] > 0] = torch.tensor(vals, dtype=out.dtype)
        b += len(g.samples)
    return out


def batch_stats(batch: Batch, learner_version: int) -> dict[str, float]:
    """Reward, accuracy (share of samples with reward >= 1), staleness, response length, the share of
    groups whose rewards are all equal (no signal for group-relative advantages) and the mean negative
    log-prob of the sampled tokens (a Monte-Carlo estimate of the policy's entropy), before training."""
    mask = batch.loss_mask > 0
    stale = (learner_version - batch.versions[mask]).float()
    n_groups = int(batch.group_index.max()) + 1
    lo = torch.full((n_groups,), float("inf")).scatter_reduce(0, batch.group_index, batch.rewards, "amin")
    hi = torch.full((n_groups,), float("-inf")).scatter_reduce(0, batch.group_index, batch.rewards, "amax")
    return {
        "reward_mean": batch.rewards.mean().item(),
        "accuracy": (batch.rewards >= 1.0).float().mean().item(),
        "samples": int(batch.rewards.numel()),
        "tokens": int(mask.sum()),
        "sequence_tokens": int(batch.attention_mask.sum()),  # prompts and completions: what the learner runs
        "staleness_mean": stale.mean().item() if stale.numel() else 0.0,
        "staleness_max": stale.max().item() if stale.numel() else 0.0,
        "response_len_mean": mask.sum(-1).float().mean().item(),
        "equal_reward_groups": (lo == hi).float().mean().item(),
        "sampled_nll_mean": -batch.behav_logprobs[mask].mean().item() if mask.any() else 0.0,
    }
