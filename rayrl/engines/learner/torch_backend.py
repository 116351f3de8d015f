"""Single-rank plain-PyTorch learner: the CPU default and the reference the sharded backends match."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import torch

from rayrl.batching import token_logprobs
from rayrl.config import Config
from rayrl.engines.learner.checkpoint import load_extra_state, save_extra_state
from rayrl.engines.learner.microbatch import MicroBatch
from rayrl.engines.learner.policy_step import DataParallel, train_step
from rayrl.engines.learner.schedule import make_scheduler
from rayrl.models.builder import load_policy
from rayrl.types import Batch


def microbatch_logprobs(model, mb: MicroBatch, temperature: float, device="cpu") -> torch.Tensor:
    """Token log-probs of one micro-batch (packed or padded) on the model's device."""
    mask = None if mb.attention_mask is None else mb.attention_mask.to(device)
    return token_logprobs(model, mb.input_ids.to(device), mask, temperature, mb.position_ids.to(device),
                          **mb.attention_kwargs(device))


def batch_logprobs(model, batch: Batch, temperature: float, device="cpu") -> torch.Tensor:
    """Token log-probs of a padded Batch, no gradients, back on the CPU."""
    with torch.no_grad():
        return token_logprobs(model, batch.input_ids.to(device), batch.attention_mask.to(device), temperature).cpu()


class TorchLearner:
    def __init__(self, cfg: Config, model_path: str, num_threads: int = 1) -> None:
        torch.set_num_threads(max(1, num_threads))
        torch.manual_seed(cfg.learner.seed)
        self.cfg = cfg
        load = (model_path, "eager", cfg.learner.logprob_chunk_tokens, cfg.learner.compile)
        self.model, self.tokenizer = load_policy(*load)
        self.ref_model = None
        if cfg.algorithm.beta > 0:
            self.ref_model = load_policy(*load)[0].eval().requires_grad_(False)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=cfg.learner.lr,
                                           weight_decay=cfg.learner.weight_decay)
        self.scheduler = make_scheduler(self.optimizer, cfg.learner)
        self.version = 0

    # ---- primitives for policy_step ------------------------------------------------------
    def logprobs(self, mb: MicroBatch, reference: bool = False) -> torch.Tensor:
        return microbatch_logprobs(self.ref_model if reference else self.model, mb, self.cfg.rollout.temperature)

    def backward(self, loss: torch.Tensor, last: bool) -> None:
        loss.backward()

    def step(self) -> float:
        norm = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.learner.grad_clip))
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return norm

    # ---- LearnerBackend ------------------------------------------------------------------
    def train_step(self, batch: Batch) -> dict[str, float]:
        stats = train_step(self, batch, DataParallel())
        self.version += 1
        return stats

    def compute_logprobs(self, batch: Batch) -> torch.Tensor:
        return batch_logprobs(self.model, batch, self.cfg.rollout.temperature)

    def named_full_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        for name, p in self.model.named_parameters():
            yield name, p.detach()

    def weight_specs(self) -> list[tuple[str, tuple[int, ...], torch.dtype]]:
        return [(n, tuple(p.shape), p.dtype) for n, p in self.model.named_parameters()]

    def save(self, path: str) -> None:
        out = Path(path)
        out.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(out)
        self.tokenizer.save_pretrained(out)
        torch.save(self.optimizer.state_dict(), out / "optimizer.pt")
        save_extra_state(out, self.scheduler, self.version)

    def load(self, path: str) -> None:
        self.model.load_state_dict(load_policy(path)[0].state_dict())
        self.optimizer.load_state_dict(torch.load(Path(path) / "optimizer.pt"))
        self.version = load_extra_state(Path(path), self.scheduler)
