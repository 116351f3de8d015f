"""Single-rank plain-PyTorch learner: the CPU default and the reference the sharded backends match."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import torch

from rayrl.algorithms import group_advantages, grpo_loss
from rayrl.batching import token_logprobs
from rayrl.config import Config
from rayrl.models.builder import load_policy
from rayrl.types import Batch


def _rows(batch: Batch, idx: slice) -> Batch:
    pick = lambda t: None if t is None else t[idx]  # noqa: E731
    return Batch(*(pick(getattr(batch, f)) for f in batch.__struct_fields__))


class TorchLearner:
    def __init__(self, cfg: Config, model_path: str, num_threads: int = 1) -> None:
        torch.set_num_threads(max(1, num_threads))
        torch.manual_seed(cfg.learner.seed)
        self.cfg = cfg
        self.model, self.tokenizer = load_policy(model_path)
        self.ref_model = None
        if cfg.algorithm.beta > 0:
            self.ref_model = load_policy(model_path)[0].eval().requires_grad_(False)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=cfg.learner.lr,
                                           weight_decay=cfg.learner.weight_decay)
        self.version = 0

    def compute_logprobs(self, batch: Batch, model=None) -> torch.Tensor:
        with torch.no_grad():
            return token_logprobs(model or self.model, batch.input_ids, batch.attention_mask,
                                  self.cfg.rollout.temperature)

    def train_step(self, batch: Batch) -> dict[str, float]:
        alg = self.cfg.algorithm
        batch.advantages = group_advantages(batch.rewards, batch.group_index, alg.std_normalize, alg.eps)
        batch.prox_logprobs = self.compute_logprobs(batch) if alg.off_policy_correction else batch.behav_logprobs
        if self.ref_model is not None:
            batch.ref_logprobs = self.compute_logprobs(batch, self.ref_model)
        n = batch.input_ids.shape[0]
        size = -(-n // self.cfg.learner.minibatches)
        losses, norms, extra = [], [], {}
        for start in range(0, n, size):
            mb = _rows(batch, slice(start, start + size))
            logp = token_logprobs(self.model, mb.input_ids, mb.attention_mask, self.cfg.rollout.temperature)
            loss, extra = grpo_loss(logp, mb.behav_logprobs, mb.prox_logprobs, mb.advantages,
                                    mb.loss_mask, alg, mb.ref_logprobs)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            norms.append(float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.learner.grad_clip)))
            self.optimizer.step()
            losses.append(loss.item())
        self.version += 1
        return {"loss": sum(losses) / len(losses), "grad_norm": sum(norms) / len(norms), **extra}

    def named_full_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        for name, p in self.model.named_parameters():
            yield name, p.detach()

    def save(self, path: str) -> None:
        out = Path(path)
        out.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(out)
        self.tokenizer.save_pretrained(out)
        torch.save({"optimizer": self.optimizer.state_dict(), "version": self.version}, out / "trainer_state.pt")

    def load(self, path: str) -> None:
        self.model.load_state_dict(load_policy(path)[0].state_dict())
        state = torch.load(Path(path) / "trainer_state.pt")
        self.optimizer.load_state_dict(state["optimizer"])
        self.version = state["version"]
