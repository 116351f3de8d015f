"""Learner modes: what bitwise on-policy and LoRA change in a learner, chosen once at build time. The Learner runs
the common path and calls its mode's hooks; plain full fine-tuning is the mode whose hooks change nothing."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path

import torch

from rayrl.config import LoraConfig
from rayrl.models.bitwise_ops import native_kernels
from rayrl.models.bitwise_qwen2 import BitwiseQwen2, digests
from rayrl.models.lora import ADAPTER_DIR, add_adapters, export_adapter, is_adapter, merged_state

log = logging.getLogger("rayrl")
Weights = Iterator[tuple[str, torch.Tensor]]


class FullMode:
    """Full fine-tuning on PyTorch's kernels: every parameter trains and every parameter is synced."""

    chunked_head = True  # the log-prob head may run in chunks of learner.logprob_chunk_tokens
    own_reference = True  # algorithm.beta > 0 loads a frozen copy of the policy as the reference
    whole_rows = False  # a row may hold several sequences (shared prompts)

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        return model

    def reference(self, backend) -> tuple[torch.nn.Module, contextlib.AbstractContextManager]:
        """The model that scores reference log-probs, and the context it runs in."""
        return backend.ref_model, contextlib.nullcontext()

    def synced(self, weights: Weights) -> Weights:
        """What a weight sync sends of the backend's full weights."""
        return weights

    def specs(self, specs: list) -> list:
        return specs

    def sends_in_place(self) -> bool:
        """Whether synced() yields the parameters themselves (a colocated engine may read them where they are)."""
        return True

    def before_step(self, model) -> None:
        """Called before the step's first forward."""

    def after_step(self, model) -> dict:
        """The step's report fields this mode adds."""
        return {}

    def export(self, model, full: dict, out: Path) -> dict:
        """Rank 0 at a checkpoint: what the HF export holds (written by the caller), after this mode's own files."""
        return full


class BitwiseMode(FullMode):
    """rollout.bitwise_on_policy: the policy's forward runs vLLM's batch-invariant kernels on vLLM's KV pages, so
    the learner's log-probs equal the engine's bit for bit; each sync's tensors are noted as digests and the first
    forward after it reports any tensor it read that differs."""

    chunked_head = False
    whole_rows = True

    def __init__(self, kv_block_size: int) -> None:
        self.kv_block_size = kv_block_size
        self.sent: dict[str, tuple[int, int]] | None = None  # the last sync's tensors, as digests

    def wrap(self, model):
        return BitwiseQwen2(model, self.kv_block_size)

    def reference(self, backend):  # never compared with vLLM's: PyTorch's faster matmuls and norms
        return backend.ref_model, native_kernels()

    def synced(self, weights):
        """Each tensor's digest as the sync sends it (bf16, the rule's sync.dtype). Filled as the transport takes
        them: it stops asking after the last tensor, so nothing after this loop would run."""
        self.sent = {}
        for name, t in weights:
            self.sent[name] = digests([t.to(torch.bfloat16)])[0]
            yield name, t

    def sends_in_place(self) -> bool:
        return False

    def before_step(self, model) -> None:
        if self.sent is not None:  # after a sync: the policy's next forward notes the weights it reads
            model.seen = {}

    def after_step(self, model) -> dict:
        """The first step after a sync: how many tensors its first forward read differ from what the sync sent
        (0: the rollout engine and the learner scored with the same weights)."""
        seen, sent, self.sent = getattr(model, "seen", None), self.sent, None
        if seen is not None:
            model.seen = None
        if not seen or sent is None:
            return {}
        unequal = [n for n in sent if n in seen and seen[n] != sent[n]]
        if unequal:
            log.warning("the scoring forward read %d tensors that differ from the last sync's, e.g. %s",
                        len(unequal), unequal[:3])
        return {"bitwise_view_unequal": len(unequal), "bitwise_view_checked": sum(n in seen for n in sent)}


class LoraMode(FullMode):
    """lora.enabled: adapters train on a frozen base (bf16 by default); the reference is the base (adapters off),
    a sync carries the adapters only, and a checkpoint adds the adapter directory and a merged export."""

    own_reference = False

    def __init__(self, section: LoraConfig) -> None:
        self.section = section

    def wrap(self, model):  # PEFT keeps the adapters it adds in fp32
        return add_adapters(model.to(getattr(torch, self.section.base_dtype)), self.section)

    def reference(self, backend):
        return backend.model, backend.model.disable_adapter()

    def synced(self, weights):
        return ((n, t) for n, t in weights if is_adapter(n))

    def specs(self, specs):
        return [s for s in specs if is_adapter(s[0])]

    def sends_in_place(self) -> bool:
        return False

    def export(self, model, full, out):
        export_adapter(model, {n: t for n, t in full.items() if is_adapter(n)}, out / ADAPTER_DIR)
        return merged_state(full, self.section)


def learner_mode(bitwise: bool, kv_block_size: int, lora: LoraConfig | None) -> FullMode:
    """The mode the run's sections choose (the config rules refuse bitwise with LoRA)."""
    if lora is not None:
        return LoraMode(lora)
    return BitwiseMode(kv_block_size) if bitwise else FullMode()
