"""Loading a policy for training or rollout: a local Hugging Face directory, offline, with the learner's
scoring head and compiled layers when asked. Nothing here builds or warms up a model (rayrl.demo.policy)."""

from __future__ import annotations

import os

import torch
from transformers import AutoModelForCausalLM

from rayrl.models.logprob_head import use_logprob_head
from rayrl.models.tokenizer import load_tokenizer


def load_policy(path: str | os.PathLike, attn_implementation: str = "eager", logprob_chunk_tokens: int | None = None,
                compile_layers: bool = False):
    """(model in fp32, tokenizer) from a local directory, offline. Eager attention on CPU keeps
    rollout and learner log-probs equal to 1e-5; GPU learners pass the varlen kernel. Learners pass
    logprob_chunk_tokens (learner.logprob_chunk_tokens) to score through a TokenLogprobHead, and
    compile_layers (learner.compile) to torch.compile each decoder layer and that head."""
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation=attn_implementation)
    if logprob_chunk_tokens is not None:
        use_logprob_head(model, logprob_chunk_tokens, compiled=compile_layers)
    if compile_layers:
        for layer in model.model.layers:
            layer.compile()  # before sharding: FSDP2 / ZeRO hooks stay outside the compiled graph
    tokenizer = load_tokenizer(path)
    return model, tokenizer
