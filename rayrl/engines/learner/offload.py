"""Optimizer state between host and device: colocated, the rollout engine uses the room between steps."""

from __future__ import annotations

import torch


def move_optimizer_state(optimizer: torch.optim.Optimizer, device: torch.device) -> None:
    """Every state tensor (DTensor shards included) to device; step counters stay where they are."""
    for state in optimizer.state.values():
        for key, value in state.items():
            if torch.is_tensor(value) and value.dim() > 0 and value.device != device:
                state[key] = value.to(device, non_blocking=True)
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()
