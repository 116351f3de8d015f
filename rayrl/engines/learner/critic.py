"""The Critic for algorithm.type=ppo: the policy's checkpoint with a one-output head on every position
(transformers' token-classification model), on the same LearnerBackend as the policy, trained on
the GAE returns the Learner computes with the clipped value loss."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModelForTokenClassification

from rayrl.algorithms import value_loss
from rayrl.config import AlgorithmConfig, LearnerConfig
from rayrl.engines.learner.base import LearnerSetup
from rayrl.engines.learner.device import attention_for, learner_device, packs_sequences
from rayrl.engines.learner.learner import data_parallel
from rayrl.engines.learner.microbatch import MicroBatch, scatter, split_minibatches, view
from rayrl.engines.registry import LEARNER_BACKENDS, resolve
from rayrl.types import Batch

STATE_FILE = "critic_state.pt"


class Critic:
    """values(batch) before the policy step, train_step(batch, returns, old values) after it."""

    def __init__(self, model_path: str, lc: LearnerConfig, alg: AlgorithmConfig, setup: LearnerSetup) -> None:
        torch.set_num_threads(max(1, setup.num_threads))
        torch.manual_seed(lc.seed)
        self.lc = lc.model_copy(update={"lr": alg.critic_lr})  # learner.* except the critic's learning rate
        self.alg = alg
        self.device, self.dp = learner_device(setup.on_gpu), data_parallel()
        model = AutoModelForTokenClassification.from_pretrained(model_path, num_labels=1, dtype=torch.float32,
                                                                attn_implementation=attention_for(self.device))
        self.backend = resolve(LEARNER_BACKENDS, lc.backend, "learner.backend")(self.lc, model, None, self.device)

    def _forward(self, mb: MicroBatch) -> torch.Tensor:
        """[R, L]: entry t is the value of the state before token t (the head's output at t - 1)."""
        d = self.device
        out = self.backend.model(input_ids=mb.input_ids.to(d), position_ids=mb.position_ids.to(d), use_cache=False,
                                 attention_mask=None if mb.attention_mask is None else mb.attention_mask.to(d),
                                 **mb.attention_kwargs(d)).logits[..., 0].float()
        return torch.cat([torch.zeros_like(out[:, :1]), out[:, :-1]], 1)

    def _minibatches(self, batch: Batch, n: int) -> list[list[MicroBatch]]:
        """The policy's layout: n minibatches of whole groups, every rank as many micro-batches in each."""
        return split_minibatches(batch, n, self.lc.max_tokens_per_micro_batch, packs_sequences(self.lc, self.device),
                                 False, self.dp.max)

    def values(self, batch: Batch) -> torch.Tensor:
        """[B, T] on the completion tokens, 0 elsewhere, no gradients (collective on sharded backends)."""
        out = torch.zeros_like(batch.loss_mask)
        with torch.no_grad():
            for mb in self._minibatches(batch, 1)[0]:
                scatter(self._forward(mb).cpu(), mb, out)
        return out * batch.loss_mask

    def train_step(self, batch: Batch, returns: torch.Tensor, old_values: torch.Tensor) -> dict[str, float]:
        """learner.minibatches optimizer steps, each on the token mean of the clipped value loss over its groups'
        tokens on every rank (the policy's minibatches)."""
        clip = self.alg.value_clip
        minibatches = self._minibatches(batch, self.lc.minibatches)
        total, clipped, norms = 0.0, 0.0, []
        for chunk in (minibatch for minibatch in minibatches if minibatch):  # none: no rank has its groups
            tokens = self.dp.sum(float(sum(view(batch.loss_mask, mb).sum() for mb in chunk)))
            for i, mb in enumerate(chunk):
                mask, target, old = (view(t, mb).to(self.device) for t in (batch.loss_mask, returns, old_values))
                per_token, fired = value_loss(self._forward(mb), old, target, mask, clip)
                loss = per_token.sum() / max(tokens, 1.0)
                self.backend.backward(loss * self.dp.world_size, last=i == len(chunk) - 1)
                total, clipped = total + loss.item(), clipped + fired.sum().item()
            norms.append(self.backend.step())
        tokens, grad_norm = self.dp.sum(float(batch.loss_mask.sum())), sum(norms) / len(norms)
        mask = batch.loss_mask > 0
        residual = (returns - old_values)[mask]
        return {"critic_loss": self.dp.sum(total) / len(norms), "critic_grad_norm": grad_norm,
                "critic_clip_frac": self.dp.sum(clipped) / max(tokens, 1.0),
                "critic_values_mean": old_values[mask].mean().item() if mask.any() else 0.0,
                # 1 - Var(returns - values) / Var(returns): how much of the returns the critic explains
                "critic_explained_var": (1 - residual.var() / returns[mask].var().clamp(min=1e-8)).item()
                if mask.sum() > 1 else 0.0}

    def save(self, path: str) -> None:
        out = Path(path)
        out.mkdir(parents=True, exist_ok=True)
        if self.dp.rank == 0:
            self.save_state(out)
        else:
            self.backend.save(out)

    def save_state(self, out: Path) -> None:
        """The backend's files and this rank's schedule (the in-memory copy learner failover keeps); collective."""
        self.backend.save(out)
        torch.save({"scheduler": self.backend.scheduler.state_dict()}, out / STATE_FILE)

    def load(self, path: str) -> None:
        self.backend.load(Path(path))
        self.backend.scheduler.load_state_dict(torch.load(Path(path) / STATE_FILE, weights_only=True)["scheduler"])
