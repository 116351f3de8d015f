"""One GRPO training step, shared by every learner backend.

A backend supplies the few primitives that differ (forward log-probs, backward, optimizer step);
this module does advantages, proximal / reference log-probs, micro-batching with gradient
accumulation, and the token normalisation that makes N ranks equal one rank on the same batch:
each rank's loss is its token sum / global tokens × world size, and data parallelism averages.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch

from rayrl.algorithms import group_advantages, grpo_loss
from rayrl.config import Config
from rayrl.engines.learner.device import packs_sequences
from rayrl.engines.learner.microbatch import MicroBatch, empty_like, microbatches
from rayrl.types import Batch


class Trainable(Protocol):
    cfg: Config

    def logprobs(self, mb: MicroBatch, reference: bool = False) -> torch.Tensor: ...

    def backward(self, loss: torch.Tensor, last: bool) -> None: ...

    def step(self) -> float: ...


@dataclass
class DataParallel:
    """How ranks agree on counts; single-rank defaults are identities."""

    world_size: int = 1
    sum: Callable[[float], float] = lambda x: x
    max: Callable[[int], int] = lambda x: x


def torch_dist_data_parallel() -> DataParallel:
    import torch.distributed as dist

    def reduce(x, op, dtype):
        t = torch.tensor([x], dtype=dtype, device="cuda" if dist.get_backend() == "nccl" else "cpu")
        dist.all_reduce(t, op=op)
        return t.item()

    return DataParallel(dist.get_world_size(), lambda x: reduce(x, dist.ReduceOp.SUM, torch.float64),
                        lambda x: int(reduce(x, dist.ReduceOp.MAX, torch.int64)))


def _chunks(items: list, n: int) -> list[list]:
    size = -(-len(items) // n)
    return [items[i: i + size] for i in range(0, len(items), size)]


def train_step(model: Trainable, batch: Batch, dp: DataParallel) -> dict[str, float]:
    cfg, alg = model.cfg, model.cfg.algorithm
    batch.advantages = group_advantages(batch.rewards, batch.group_index, alg.std_normalize, alg.eps)
    mbs = microbatches(batch, cfg.learner.max_tokens_per_micro_batch, packs_sequences(cfg))
    mbs += [empty_like(mbs[0])] * (dp.max(len(mbs)) - len(mbs))  # every rank runs as many passes
    with torch.no_grad():
        for mb in mbs:
            mb.prox_logprobs = model.logprobs(mb).cpu() if alg.off_policy_correction else mb.behav_logprobs
            mb.ref_logprobs = model.logprobs(mb, reference=True).cpu() if alg.beta > 0 else None
    n_steps = min(cfg.learner.minibatches, len(mbs))
    losses, norms, extra = [], [], {}
    for chunk in _chunks(mbs, n_steps):
        tokens = dp.sum(float(sum(mb.loss_mask.sum() for mb in chunk)))
        total = 0.0
        for i, mb in enumerate(chunk):
            logp = model.logprobs(mb)
            loss, extra = grpo_loss(logp, *(_on(t, logp) for t in (mb.behav_logprobs, mb.prox_logprobs)),
                                    _on(mb.advantages, logp), _on(mb.loss_mask, logp), alg,
                                    _on(mb.ref_logprobs, logp), denom=tokens)
            model.backward(loss * dp.world_size, last=i == len(chunk) - 1)
            total += loss.item()
        norms.append(model.step())
        losses.append(dp.sum(total))
    return {"loss": sum(losses) / len(losses), "grad_norm": sum(norms) / len(norms),
            "micro_batches": len(mbs), **extra}


def _on(t: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor | None:
    return None if t is None else t.to(like.device)
