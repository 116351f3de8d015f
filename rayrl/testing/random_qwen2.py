"""Randomly initialised Qwen2 models of real shapes (0.5B, 1.5B) with a char tokenizer, saved offline: the
benchmarks' and GPU checks' models, where weights need not mean anything."""

from __future__ import annotations

import os
from pathlib import Path

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from rayrl.models.tokenizer import CHARS, build_char_tokenizer

QWEN2_0_5B_SHAPE = dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                        num_key_value_heads=2, head_dim=64, vocab_size=151936)
QWEN2_1_5B_SHAPE = dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                        num_key_value_heads=2, head_dim=128, vocab_size=151936)
# a smoke run's model: the same code paths as the shapes above in a few MB (CPU, vLLM's CPU engine)
TINY_SHAPE = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                  num_key_value_heads=1, head_dim=32)


def save_random_qwen2(out: str | os.PathLike, initializer_range: float = 0.02, dtype=torch.bfloat16,
                      chars: list[str] = CHARS, weights: bool = True, **shape) -> Path:
    """A randomly initialised Qwen2 of the given shape plus a char tokenizer over chars, saved offline.

    A large initializer_range makes next-token distributions peaked rather than near-uniform.
    weights=False writes config and tokenizer only, for vLLM's load_format="dummy"."""
    out = Path(out)
    tokenizer = build_char_tokenizer(chars)
    shape = {"vocab_size": len(tokenizer), **shape}
    config = Qwen2Config(**shape, max_position_embeddings=4096, tie_word_embeddings=shape["hidden_size"] < 2048,
                         initializer_range=initializer_range, bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                         torch_dtype=str(dtype).removeprefix("torch."))
    if weights:
        torch.manual_seed(0)
        Qwen2ForCausalLM(config).to(dtype).save_pretrained(out)
    else:
        config.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
