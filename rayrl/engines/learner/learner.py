"""The Learner: one policy-gradient training step, log-prob scoring, the policy version and checkpoints, for every
backend. A LearnerBackend supplies only primitives (backward, optimizer step, full weights, save/load).

Token normalisation makes N ranks equal one rank on the same batch: each rank's loss is its token sum /
global tokens × world size, and data parallelism averages the gradients.
"""

from __future__ import annotations

import logging
import math
from contextlib import nullcontext
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from rayrl.algorithms import KL_ESTIMATORS, advantages, denominator, policy_loss, token_weights
from rayrl.algorithms.distill import with_teacher
from rayrl.algorithms.mismatch import MismatchMeter
from rayrl.algorithms.shaping import shape_batch
from rayrl.config import AlgorithmConfig, LearnerConfig
from rayrl.engines.learner.base import LearnerBackend, LearnerSetup
from rayrl.engines.learner.checkpoint import export_hf
from rayrl.engines.learner.device import attention_for, learner_device, packs_sequences, shares_prompts
from rayrl.engines.learner.offload import move_optimizer_state
from rayrl.engines.learner.microbatch import MicroBatch, scatter, split_minibatches, view
from rayrl.engines.learner.modes import learner_mode
from rayrl.engines.learner.scoring import batch_logprobs, microbatch_logprobs
from rayrl.engines.registry import LEARNER_BACKENDS, resolve
from rayrl.models.policy import load_policy
from rayrl.models.vision import VisionPrompts, attach_images
from rayrl.types import Batch

STATE_FILE = "learner_state.pt"  # version, LR schedule and RNG, beside the backend's own files

log = logging.getLogger("rayrl")


@dataclass
class DataParallel:
    """How ranks agree on counts; single-rank defaults are identities."""

    world_size: int = 1
    rank: int = 0
    sum: Callable[[float], float] = lambda x: x
    max: Callable[[int], int] = lambda x: x


def data_parallel() -> DataParallel:
    """All-reduces over the default process group, or identities when there is none (one plain rank)."""
    if not dist.is_initialized():
        return DataParallel()

    def reduce(x, op, dtype):
        t = torch.tensor([x], dtype=dtype, device="cuda" if dist.get_backend() == "nccl" else "cpu")
        dist.all_reduce(t, op=op)
        return t.item()

    return DataParallel(dist.get_world_size(), dist.get_rank(),
                        lambda x: reduce(x, dist.ReduceOp.SUM, torch.float64),
                        lambda x: int(reduce(x, dist.ReduceOp.MAX, torch.int64)))


class Learner:
    """Loads the policy (and the frozen reference when algorithm.beta > 0), hands both to the backend
    chosen by learner.backend, and owns everything above the backend's primitives."""

    def __init__(self, model_path: str, lc: LearnerConfig, alg: AlgorithmConfig, setup: LearnerSetup) -> None:
        torch.set_num_threads(max(1, setup.num_threads))
        torch.manual_seed(lc.seed)
        self.lc, self.alg, self.setup = lc, alg, setup
        self.device, self.dp = learner_device(setup.on_gpu), data_parallel()
        self.mode = learner_mode(setup.bitwise, setup.kv_block_size, setup.lora)  # full, bitwise or LoRA: its hooks
        self.share_prompts = shares_prompts(lc, self.device, self.mode.whole_rows)
        chunk = lc.logprob_chunk_tokens if self.mode.chunked_head else None
        load = (model_path, attention_for(self.device), chunk, lc.compile)
        model, self.tokenizer = load_policy(*load)
        self.hf_config = model.config
        self.vision = VisionPrompts.load(model_path, model.config, self.tokenizer)  # None: a text-only policy
        if self.vision is not None:
            if lc.share_prompts:
                raise ValueError("learner.share_prompts=true does not take a vision-language policy; leave it unset")
            self.share_prompts = False
            model.model.visual.requires_grad_(lc.train_vision)
        model = self.mode.wrap(model)
        ref = None
        if alg.beta > 0 and self.mode.own_reference:
            ref = self.mode.wrap(load_policy(*load)[0]).eval().requires_grad_(False)
        backend_cls = resolve(LEARNER_BACKENDS, lc.backend, "learner.backend")
        if self.device.type == "cuda" and lc.gpu_memory_fraction is not None:  # colocate, share: the rest is the engine's
            torch.cuda.set_per_process_memory_fraction(lc.gpu_memory_fraction)
        self.backend: LearnerBackend = backend_cls(lc, model, ref, self.device)
        self.offloaded = False  # optimizer state in host memory (learner.offload_optimizer), until the next step
        self.version = 0
        # one optimizer step per batch: the proximal policy is the one the loss's forward runs, so its log-probs
        # are that forward's, detached; no scoring pass (kl_in_reward needs them before the advantages). The
        # bitwise forward gives the same bits with or without gradients: its mismatch is the loss forward's too
        self.prox_from_loss = (alg.off_policy_correction and lc.minibatches == 1
                               and not (alg.beta > 0 and alg.kl_in_reward))
        self.last_returns: torch.Tensor | None = None  # ppo: the last step's returns, the critic's targets

    # ---- scoring ------------------------------------------------------------------------------
    def _logprobs(self, mb: MicroBatch, reference: bool = False, entropy: bool = False):
        model, context = self.mode.reference(self.backend) if reference else (self.backend.model, nullcontext())
        with context:
            return microbatch_logprobs(model, mb, self.setup.temperature, self.device, entropy)

    def compute_logprobs(self, batch: Batch) -> torch.Tensor:
        """Collective on sharded backends: every rank must call it with a batch of the same shape."""
        attach_images(batch, self.vision)
        return batch_logprobs(self.backend.model, batch, self.setup.temperature, self.device)

    # ---- the step -----------------------------------------------------------------------------
    def _score(self, mbs: list[MicroBatch], batch: Batch) -> tuple[MismatchMeter, torch.Tensor | None]:
        """Proximal (unless prox_from_loss) and reference log-probs per micro-batch, no gradients; the mismatch
        against the rollout engine on tokens of this version; the per-token KL for kl_in_reward, as [B, T]."""
        alg = self.alg
        mismatch = MismatchMeter()
        kl = torch.zeros_like(batch.loss_mask) if alg.beta > 0 and alg.kl_in_reward else None
        with torch.no_grad():
            for mb in mbs:
                if alg.off_policy_correction and not self.prox_from_loss:
                    mb.prox_logprobs = self._logprobs(mb).cpu()
                    self._add_mismatch(mismatch, mb, mb.prox_logprobs)
                elif not alg.off_policy_correction:
                    mb.prox_logprobs = mb.behav_logprobs
                mb.ref_logprobs = self._logprobs(mb, reference=True).cpu() if alg.beta > 0 else None
                if kl is not None:
                    scatter(KL_ESTIMATORS[alg.kl_estimator](mb.prox_logprobs, mb.ref_logprobs), mb, kl)
        return mismatch, kl

    def _add_mismatch(self, mismatch: MismatchMeter, mb: MicroBatch, logp: torch.Tensor) -> None:
        """Learner against rollout engine on the tokens sampled by the weights held now."""
        mismatch.add(logp, mb.behav_logprobs, (mb.loss_mask > 0) & (mb.versions == self.version))

    def train_step(self, batch: Batch, values: torch.Tensor | None = None) -> dict[str, float]:
        """Overlong shaping, proximal / reference log-probs, advantages, micro-batches with gradient
        accumulation, learner.minibatches optimizer steps; the policy version advances by one.
        values: the critic's [B, T] (algorithm.type=ppo); the returns it should learn are left in
        self.last_returns."""
        lc, alg, dp, backend = self.lc, self.alg, self.dp, self.backend
        self.reclaim()
        rewards, mask = shape_batch(batch.rewards, batch.loss_mask, batch.truncated, self.setup.max_new_tokens, alg)
        attach_images(batch, self.vision)
        minibatches = split_minibatches(batch, lc.minibatches, lc.max_tokens_per_micro_batch,
                                        packs_sequences(lc, self.device), self.share_prompts, dp.max)
        mbs = [mb for minibatch in minibatches for mb in minibatch]
        self.mode.before_step(self.backend.model)
        mismatch, kl = self._score(mbs, batch)
        batch.advantages, self.last_returns = advantages(rewards, batch.group_index, mask, alg, kl, values)
        if self.setup.distill:  # on-policy distillation: every token's teacher signal, never a batch without it
            if batch.teacher_logprobs is None:
                raise ValueError("teacher.enabled, but a sample of this batch has no teacher log-probs")
            batch.advantages = with_teacher(batch.advantages, batch.teacher_logprobs, batch.behav_logprobs, mask, alg)
        if dp.max(int(not torch.isfinite(batch.advantages).all())):  # every rank agrees, before any backward
            return self._skipped("advantages", mbs, mismatch)
        weights = token_weights(mask, batch.group_index, alg.aggregation())
        for mb in mbs:
            mb.advantages, mb.weights = view(batch.advantages, mb), view(weights, mb)
        entropy = alg.entropy_coef > 0
        losses, norms, extra = [], [], {}
        for chunk in (minibatch for minibatch in minibatches if minibatch):  # none: no rank has its groups
            denom = denominator(dp.sum(float(sum(mb.weights.sum() for mb in chunk))),
                                dp.sum(float(sum(mb.n_sequences for mb in chunk))), alg.aggregation(),
                                self.setup.max_new_tokens)
            # on the device at once; from here to the optimizer step nothing waits for the device
            chunk = [mb.to(self.device) for mb in chunk]
            chunk_losses = []
            for i, mb in enumerate(chunk):
                out = self._logprobs(mb, entropy=entropy)
                logp, ent = out if entropy else (out, None)
                if self.prox_from_loss:
                    mb.prox_logprobs = logp.detach()
                    self._add_mismatch(mismatch, mb, mb.prox_logprobs)
                loss, extra = policy_loss(logp, mb.behav_logprobs, mb.prox_logprobs, mb.advantages, mb.weights, alg,
                                          denom, mb.seq_ids, mb.ref_logprobs, ent)
                backend.backward(loss * dp.world_size, last=i == len(chunk) - 1)
                chunk_losses.append(loss.detach())
            total = float(torch.stack(chunk_losses).sum())  # the chunk's one host sync before its step
            if dp.max(int(not math.isfinite(total))):  # every rank agrees, before any update
                if not backend.discard_grads():
                    raise RuntimeError(f"non-finite loss at step {self.version + 1}; learner.backend="
                                       f"{lc.backend} cannot drop an accumulated step")
                return self._skipped("loss", mbs, mismatch)
            norms.append(backend.step())
            if not math.isfinite(norms[-1]):  # the backend did not apply it
                return self._skipped("gradients", mbs, mismatch)
            losses.append(dp.sum(total))
        self.version += 1
        return {"loss": sum(losses) / len(losses), "grad_norm": sum(norms) / len(norms),
                "micro_batches": len(mbs), "skipped": "", **mismatch.result(), **self.mode.after_step(self.backend.model),
                **{k: float(v) for k, v in extra.items()}}

    def _skipped(self, cause: str, mbs: list, mismatch: MismatchMeter) -> dict[str, float]:
        """A step whose advantages, loss or gradients were not finite: no update, the version still
        advances (the driver counts it, or stops the run with learner.nonfinite=stop)."""
        self.version += 1
        return {"loss": 0.0, "grad_norm": 0.0, "micro_batches": len(mbs), "skipped": cause, **mismatch.result(),
                **self.mode.after_step(self.backend.model)}

    # ---- colocated: room for the rollout engine between steps --------------------------------
    def release(self) -> None:
        """Optimizer state to host memory (learner.offload_optimizer), the allocator's cache to the device."""
        if self.lc.offload_optimizer and not self.offloaded:
            move_optimizer_state(self.backend.optimizer, torch.device("cpu"))
            self.offloaded = True
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def reclaim(self) -> None:
        if self.offloaded:
            move_optimizer_state(self.backend.optimizer, self.device)
            self.offloaded = False

    # ---- weights and checkpoints ------------------------------------------------------------
    def named_full_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """What a weight sync sends: every parameter, or with LoRA only the adapters. Collective on sharded
        backends: every rank walks it in lockstep."""
        return self.mode.synced(self.backend.named_full_weights())

    def weights_in_place(self) -> bool:
        """Whether named_full_weights yields this rank's own parameters, whole and updated in place by each step
        (then a colocated engine may read them where they are)."""
        return self.mode.sends_in_place() and self.backend.whole_parameters

    def weight_specs(self) -> list[tuple[str, tuple[int, ...], torch.dtype]]:
        return self.mode.specs(self.backend.weight_specs())

    def save(self, path: str) -> None:
        """The backend's training state, plus (rank 0) an HF export and the learner state; collective."""
        out = Path(path)
        out.mkdir(parents=True, exist_ok=True)
        self.reclaim()
        self.backend.save(out)
        full = {name: t.detach().cpu() for name, t in self.backend.named_full_weights()}
        if self.dp.rank == 0:
            full = self.mode.export(self.backend.model, full, out)  # LoRA: its adapter directory, merged weights
            export_hf(full, self.hf_config, self.tokenizer, out, self.vision.processor if self.vision else None)
            self._save_own_state(out)
        if dist.is_initialized():
            dist.barrier()

    def save_state(self, out: Path) -> None:
        """The training state alone, without the export: the backend's files and this rank's version, schedule
        and RNG (the in-memory copy learner failover keeps); collective."""
        self.reclaim()
        self.backend.save(out)
        self._save_own_state(out)

    def _save_own_state(self, out: Path) -> None:
        torch.save({"version": self.version, "scheduler": self.backend.scheduler.state_dict(),
                    "rng": torch.get_rng_state()}, out / STATE_FILE)

    def load(self, path: str) -> None:
        out = Path(path)
        self.reclaim()
        self.backend.load(out)
        state = torch.load(out / STATE_FILE, weights_only=True)
        self.backend.scheduler.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["rng"])
        self.version = state["version"]
