"""Where a learner computes, with which attention kernel, and whether it packs micro-batches."""

from __future__ import annotations

import torch

from rayrl.config import Config


def learner_device(cfg: Config) -> torch.device:
    return torch.device("cuda") if cfg.cluster.n_gpus_per_node > 0 and torch.cuda.is_available() \
        else torch.device("cpu")


def attention_for(device: torch.device) -> str:
    """FlashAttention-2 varlen on GPU (packed and padded rows); eager on CPU, where the exact-equality
    tests run (PyTorch's flash kernels are CUDA-only)."""
    if device.type != "cuda":
        return "eager"
    from rayrl.models.varlen_attention import VARLEN  # registers it with transformers

    return VARLEN


def packs_sequences(cfg: Config) -> bool:
    """learner.pack_sequences, or by default: packed where the varlen kernel runs (GPU), padded on CPU,
    where eager attention would turn a packed row into a dense [tokens × tokens] mask."""
    if cfg.learner.pack_sequences is not None:
        return cfg.learner.pack_sequences
    return learner_device(cfg).type == "cuda"
