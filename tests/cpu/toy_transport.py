"""A transport added from outside the library, as a user would: one module, named by import string
(sync.transport=tests.cpu.toy_transport:FILES). Learner rank 0 saves each sync's tensors to a file; the hf engine
loads them. Each sync's file is kept, so a test can count them."""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

import torch

from rayrl.engines.transport.base import BucketPlan, GroupInfo, checked_in_plan_order

ROOT = Path(tempfile.gettempdir()) / "rayrl-toy-transport"


class FileEnd:
    """Both ends: send() writes the tensors and returns the file's path; receive(path) reads them back."""

    def __init__(self) -> None:
        self.folder: Path | None = None
        self.count = itertools.count()

    def init(self, group_info: GroupInfo) -> None:
        self.folder = ROOT / (group_info.key or str(group_info.master_port))
        self.folder.mkdir(parents=True, exist_ok=True)

    def send(self, named_tensors: Iterable[tuple[str, torch.Tensor]], plan: BucketPlan) -> str:
        path = self.folder / f"sync-{next(self.count)}.pt"
        torch.save([(n, t.detach().cpu().clone()) for n, t in checked_in_plan_order(named_tensors, plan)], path)
        return str(path)

    def receive(self, meta: str) -> Iterator[tuple[str, torch.Tensor]]:
        return iter(torch.load(meta))


class Files:
    name, collective = "files", False

    def requirements(self, c) -> str | None:
        if c.rollout.engine != "hf" or c.on_gpu:
            return "sync.transport=tests.cpu.toy_transport:FILES serves rollout.engine=hf on CPU only"
        return None

    def sender(self, in_place: bool = False) -> FileEnd:
        return FileEnd()

    def receiver(self) -> FileEnd:
        return FileEnd()


FILES = Files()
