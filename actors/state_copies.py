"""What a learner or critic rank keeps for failover: copies of its own training state and of its left neighbour's
(rank r holds r - 1's), by step. A rank that dies leaves its copy on its neighbour; two neighbours dying at once
lose one, and the run falls back to its last checkpoint on disk."""

from __future__ import annotations

from rayrl.engines.learner.state_copy import StateFiles, restore_copy, take_copy


class StateCopies:
    """Mixed into LearnerWorker and CriticWorker, which set rank, copies = {} and state_owner (their Learner or
    Critic: save_state(dir) and load(dir))."""

    rank: int
    copies: dict[tuple[int, int], StateFiles]  # (rank, step) -> its files
    state_owner: object

    def take_copy(self, step: int, keep_from: int) -> StateFiles:
        """This rank's training state after `step` (collective: every rank at once), kept and returned for its
        neighbour; copies of steps before keep_from are dropped."""
        files = take_copy(self.state_owner.save_state)
        self.hold_copy(self.rank, step, files, keep_from)
        return files

    def hold_copy(self, rank: int, step: int, files: StateFiles, keep_from: int) -> None:
        self.copies = {k: v for k, v in self.copies.items() if k[1] >= keep_from}
        self.copies[(rank, step)] = files

    def copy_steps(self) -> dict[int, list[int]]:
        """The steps this rank holds a copy of, per rank they belong to."""
        out: dict[int, list[int]] = {}
        for rank, step in sorted(self.copies):
            out.setdefault(rank, []).append(step)
        return out

    def copy_of(self, rank: int, step: int) -> StateFiles:
        return self.copies[(rank, step)]

    def restore_copy(self, step: int, *copies: StateFiles) -> int:
        """Load every rank's copy of `step` (collective); this rank keeps its own and its neighbour's, as after
        take_copy. Returns step."""
        restore_copy(list(copies), self.rank, self.state_owner.load)
        left = (self.rank - 1) % len(copies)
        self.copies = {(self.rank, step): copies[self.rank], (left, step): copies[left]}
        return step
