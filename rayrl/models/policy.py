"""Loading a policy for training or rollout: a local Hugging Face directory, offline, with the learner's
scoring head and compiled layers when asked. Nothing here builds or warms up a model (rayrl.demo.policy)."""

from __future__ import annotations

import os

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText

from rayrl.models.logprob_head import use_logprob_head
from rayrl.models.tokenizer import load_tokenizer


def load_policy(path: str | os.PathLike, attn_implementation: str = "eager", logprob_chunk_tokens: int | None = None,
                compile_layers: bool = False):
    """(model in fp32, tokenizer) from a local directory, offline. Eager attention on CPU keeps
    rollout and learner log-probs equal to 1e-5; GPU learners pass the varlen kernel. Learners pass
    logprob_chunk_tokens (learner.logprob_chunk_tokens) to score through a TokenLogprobHead, and
    compile_layers (learner.compile) to torch.compile each decoder layer and that head."""
    config = AutoConfig.from_pretrained(path)
    model = model_class(config).from_pretrained(path, dtype=torch.float32,
                                                attn_implementation=attention_per_part(config, attn_implementation))
    if logprob_chunk_tokens is not None:
        use_logprob_head(model, logprob_chunk_tokens, compiled=compile_layers)
    if compile_layers:
        for layer in decoder_layers(model):
            layer.compile()  # before sharding: FSDP2 / ZeRO hooks stay outside the compiled graph
    tokenizer = load_tokenizer(path)
    return model, tokenizer


def attention_per_part(config, attn_implementation: str) -> str | dict:
    """The attention for the language model; a vision tower keeps PyTorch's sdpa unless eager is asked for (CPU):
    the GPU learner's varlen kernel is causal, where a picture's patches attend both ways (given to the tower, it
    failed with an illegal memory access on an H100)."""
    if getattr(config, "vision_config", None) is None or attn_implementation == "eager":
        return attn_implementation
    return {"": attn_implementation, "text_config": attn_implementation, "vision_config": "sdpa"}


def decoder_layers(model) -> torch.nn.ModuleList:
    """The language model's decoder layers (a vision-language model keeps them under model.language_model)."""
    inner = model.model
    return getattr(inner, "language_model", inner).layers


def model_class(config):
    """The transformers auto class for a policy's config: vision-language models (Qwen2-VL) are no causal-LM class."""
    return AutoModelForImageTextToText if getattr(config, "vision_config", None) is not None else AutoModelForCausalLM
