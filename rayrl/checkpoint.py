"""Resumable run checkpoints: written atomically (temporary directory, manifest last, rename), the
newest checkpoint.keep kept, found again by checkpoint.resume. The learner writes its own state into
the checkpoint's learner/ folder; this module holds the driver's part and the directory rules."""

from __future__ import annotations

import json
import os
import shutil
import socket
import uuid
from pathlib import Path

import msgspec

from rayrl.buffer import Ledger
from rayrl.types import TrajectoryGroup

MANIFEST = "manifest.json"  # written last: a checkpoint without it is incomplete and never resumed
BUFFER = "buffer.msgpack"  # the finished, untrained groups, oldest first
PREFIX = "step-"


class RunState(msgspec.Struct):
    """What the driver needs to continue: the step, the policy version, the prompt stream's position,
    which fed prompts were not trained yet (those not among the buffer's finished groups are generated
    again: never lost, never trained twice), the buffer's ledger and the wandb run."""

    step: int
    version: int
    fed: int  # prompts taken from the stream so far
    pending: list[int]  # stream positions fed but not trained
    samples: int  # samples trained so far
    eval_accuracy_before: float
    ledger: Ledger = msgspec.field(default_factory=Ledger)  # the buffer's group counts
    wandb_id: str = ""


class StorageError(RuntimeError):
    """The checkpoint directory cannot be used; the message names it."""


def check_writable(root: Path) -> None:
    """Create root and write a marker in it, or raise naming the path (before any work starts)."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        marker = root / f".writable-{socket.gethostname()}-{os.getpid()}"
        marker.write_text("ok")
        marker.unlink()
    except OSError as err:
        raise StorageError(f"checkpoint directory '{root}' is not writable ({err.strerror}); set checkpoint.dir "
                           "to a writable path or checkpoint.every_steps=0") from None


def checkpoint_path(root: Path, step: int) -> Path:
    return root / f"{PREFIX}{step:08d}"


def begin(root: Path, step: int) -> Path:
    """A fresh temporary directory for the checkpoint of this step (the learner writes into it first), named anew
    for each save: a learner rank of an earlier life that wakes up and finishes a save it was given writes into
    that save's directory, which nothing commits, never into this one. Earlier saves' directories of the step go."""
    name = checkpoint_path(root, step).name
    for stale in root.glob(f".tmp-{name}*"):
        shutil.rmtree(stale, ignore_errors=True)
    tmp = root / f".tmp-{name}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir(parents=True)
    return tmp


def commit(tmp: Path, root: Path, state: RunState, groups: list[TrajectoryGroup], keep: int) -> Path:
    """Buffer and state, then the manifest, then the rename: a crash at any point leaves no half
    checkpoint."""
    (tmp / BUFFER).write_bytes(msgspec.msgpack.encode(groups))
    (tmp / "run_state.json").write_bytes(msgspec.json.encode(state))
    (tmp / MANIFEST).write_text(json.dumps({"step": state.step, "version": state.version}))
    final = checkpoint_path(root, state.step)
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    for old in complete(root)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def complete(root: Path) -> list[Path]:
    """Complete checkpoints under root, oldest first."""
    if not root.is_dir():
        return []
    return sorted(p for p in root.glob(f"{PREFIX}*") if (p / MANIFEST).is_file())


def load_state(path: Path) -> RunState:
    if not (path / MANIFEST).is_file():
        raise FileNotFoundError(f"'{path}' is not a complete checkpoint (no {MANIFEST})")
    return msgspec.json.decode((path / "run_state.json").read_bytes(), type=RunState)


def load_groups(path: Path) -> list[TrajectoryGroup]:
    file = path / BUFFER
    return msgspec.msgpack.decode(file.read_bytes(), type=list[TrajectoryGroup]) if file.is_file() else []


def find_resume(resume: str, root: Path) -> Path | None:
    """checkpoint.resume -> the checkpoint to continue, or None to start fresh."""
    if resume == "never":
        return None
    if resume == "auto":
        found = complete(root)
        return found[-1] if found else None
    path = Path(resume).expanduser()
    load_state(path)  # raises naming the path when it is not a complete checkpoint
    return path


def truncate_metrics(metrics_file: Path, step: int) -> None:
    """Drop a JSONL log's records after step (they are redone on resume) and any summary line."""
    if not metrics_file.is_file():
        return
    kept = [line for line in metrics_file.read_text().splitlines()
            if "summary" not in (rec := json.loads(line)) and rec.get("step", 0) <= step]
    metrics_file.write_text("".join(line + "\n" for line in kept))
