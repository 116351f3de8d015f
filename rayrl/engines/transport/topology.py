"""Ranks of the weight-sync group: learner rank 0 is rank 0, then each rollout worker's ranks in order."""

from __future__ import annotations

import msgspec


class SyncTopology(msgspec.Struct, frozen=True):
    world_size: int
    first_ranks: list[int]  # per rollout worker, the group rank of its first shard


def topology(ranks_per_worker: list[int]) -> SyncTopology:
    """ranks_per_worker[i]: how many ranks rollout worker i adds (vLLM: one per tensor-parallel shard)."""
    if any(n < 1 for n in ranks_per_worker):
        raise ValueError(f"every rollout worker needs at least one sync rank, got {ranks_per_worker}")
    firsts, next_rank = [], 1
    for n in ranks_per_worker:
        firsts.append(next_rank)
        next_rank += n
    return SyncTopology(next_rank, firsts)
