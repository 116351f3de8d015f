"""Single-rank plain-PyTorch backend: the CPU default and the reference the sharded backends match."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import torch

from rayrl.config import LearnerConfig
from rayrl.engines.learner.schedule import load_trained, make_optimizer, make_scheduler, trained_only


class TorchBackend:
    def __init__(self, lc: LearnerConfig, model, ref_model, device: torch.device) -> None:
        self.lc = lc
        self.model = model.to(device)
        self.ref_model = None if ref_model is None else ref_model.to(device)
        self.optimizer = make_optimizer(self.model.parameters(), lc)
        self.scheduler = make_scheduler(self.optimizer, lc)
        self.whole_parameters = True

    def backward(self, loss: torch.Tensor, last: bool) -> None:
        loss.backward()

    def step(self) -> float:
        """A non-finite gradient norm skips the update (and the LR schedule), dropping the gradients."""
        norm = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.lc.grad_clip))
        if math.isfinite(norm):
            self.optimizer.step()
            self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return norm

    def discard_grads(self) -> bool:
        self.optimizer.zero_grad(set_to_none=True)
        return True

    def named_full_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        for name, p in self.model.named_parameters():
            yield name, p.detach()

    def weight_specs(self) -> list[tuple[str, tuple[int, ...], torch.dtype]]:
        return [(n, tuple(p.shape), p.dtype) for n, p in self.model.named_parameters()]

    def save(self, out: Path) -> None:
        torch.save({"model": trained_only(self.model, self.model.state_dict()), "optimizer": self.optimizer.state_dict()},
                   out / "torch_state.pt")

    def load(self, out: Path) -> None:
        state = torch.load(out / "torch_state.pt", weights_only=True)
        load_trained(self.model, state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
