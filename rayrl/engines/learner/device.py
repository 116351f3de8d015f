"""Where a learner computes, with which attention kernel, and whether it packs micro-batches."""

from __future__ import annotations

import torch

from rayrl.config import LearnerConfig


def learner_device(on_gpu: bool) -> torch.device:
    """cuda when the run has GPUs (cluster.n_gpus_per_node > 0) and this process sees one."""
    return torch.device("cuda") if on_gpu and torch.cuda.is_available() else torch.device("cpu")


def attention_for(device: torch.device) -> str:
    """FlashAttention-2 varlen on GPU (packed and padded rows); eager on CPU, where the exact-equality
    tests run (PyTorch's flash kernels are CUDA-only)."""
    if device.type != "cuda":
        return "eager"
    from rayrl.models.varlen_attention import VARLEN  # registers it with transformers

    return VARLEN


def packs_sequences(lc: LearnerConfig, device: torch.device) -> bool:
    """learner.pack_sequences, or by default: packed where the varlen kernel runs (GPU), padded on CPU,
    where eager attention would turn a packed row into a dense [tokens × tokens] mask."""
    if lc.pack_sequences is not None:
        return lc.pack_sequences
    return device.type == "cuda"


def shares_prompts(lc: LearnerConfig, device: torch.device, bitwise: bool) -> bool:
    """learner.share_prompts, or by default: on where rows are padded and attention is eager (CPU), never in the
    bitwise mode (its forward is vLLM's, one sequence a row)."""
    possible = device.type == "cpu" and not packs_sequences(lc, device) and not bitwise
    if lc.share_prompts and not possible:
        raise ValueError("learner.share_prompts=true needs a CPU learner with padded rows (learner.pack_sequences="
                         "false) outside the bitwise mode; leave it unset to share prompts wherever that holds")
    return possible if lc.share_prompts is None else lc.share_prompts
