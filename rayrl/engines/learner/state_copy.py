"""A rank's training state as bytes in memory, and back: what learner failover keeps off the rank. The backend's
own checkpoint code writes it (so a copy restores exactly as a checkpoint does), into a temporary directory that
is read back and removed."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

StateFiles = dict[str, bytes]  # path relative to the checkpoint directory -> the file's bytes


def take_copy(save_state: Callable[[Path], None]) -> StateFiles:
    """save_state(directory) (collective on sharded backends), the files it wrote as bytes."""
    with tempfile.TemporaryDirectory(prefix="rayrl-state-") as tmp:
        root = Path(tmp)
        save_state(root)
        return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def restore_copy(copies: list[StateFiles], rank: int, load: Callable[[Path], None]) -> None:
    """Every rank's files in one directory, this rank's own written last (its per-rank state file wins where names
    meet), then load(directory) (collective on sharded backends)."""
    with tempfile.TemporaryDirectory(prefix="rayrl-state-") as tmp:
        root = Path(tmp)
        for r in [*(r for r in range(len(copies)) if r != rank), rank]:
            for name, data in copies[r].items():
                path = root / name
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
        load(root)
