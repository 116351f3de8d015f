"""Admission control for asynchronous rollouts (AReaL's bounded staleness).

A prompt group is admitted only while accepted + running < (η + v + 1) · batch_size, where v is
the policy version the rollout workers hold: the learner step whose weights they were last sent. η = 0 is synchronous RL.
"""

from __future__ import annotations


class StalenessManager:
    def __init__(self, batch_size: int, max_staleness: int, version: int = 0, accepted: int = 0) -> None:
        if batch_size < 1 or max_staleness < 0:
            raise ValueError(f"need batch_size >= 1 and max_staleness >= 0, got {batch_size}, {max_staleness}")
        self.batch_size = batch_size
        self.max_staleness = max_staleness
        self.version = version
        self.accepted = accepted  # groups finished and handed to the buffer, ever
        self.running = 0  # groups admitted and still being generated

    def capacity(self) -> int:
        limit = (self.max_staleness + self.version + 1) * self.batch_size
        return limit - (self.accepted + self.running)

    def try_admit(self, n: int = 1) -> int:
        """Admit up to n groups now; returns how many were admitted."""
        granted = max(0, min(n, self.capacity()))
        self.running += granted
        return granted

    def on_accept(self) -> None:
        self._finish()
        self.accepted += 1

    def on_reject(self) -> None:
        """A group that was admitted but produced nothing usable frees its slot."""
        self._finish()

    def on_drop(self) -> None:
        """An accepted group that will not be trained (it came back past the bound) frees its slot."""
        if self.accepted <= 0:
            raise RuntimeError("a group was dropped that was never accepted")
        self.accepted -= 1

    def too_old(self, version: int) -> bool:
        """A group whose oldest tokens come from this version is past the bound at the current version."""
        return self.version - version > self.max_staleness

    def set_version(self, version: int) -> None:
        if version < self.version:
            raise ValueError(f"policy version went back from {self.version} to {version}")
        self.version = version

    def _finish(self) -> None:
        if self.running <= 0:
            raise RuntimeError("a group finished that was never admitted")
        self.running -= 1
