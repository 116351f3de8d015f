"""A tiny Qwen2-VL-shaped policy built offline: a small vision tower, the character tokenizer with Qwen2-VL's image
markup, and its image processor (PIL backend) sized for the demo's small pictures."""

from __future__ import annotations

import os
from pathlib import Path

import torch
from transformers import AutoImageProcessor, Qwen2VLConfig, Qwen2VLForConditionalGeneration
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

from rayrl.models.tokenizer import CHARS, build_char_tokenizer
from rayrl.models.vision import VISION_TOKENS

TINY_VL_SHAPE = dict(hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4, num_kv_heads=2,
                     vision_depth=2, vision_dim=32)


def build_vision_tokenizer(chars: list[str] = CHARS):
    """One token per character plus the three image-markup tokens as specials."""
    tokenizer = build_char_tokenizer(chars)
    tokenizer.add_special_tokens({"additional_special_tokens": VISION_TOKENS})
    return tokenizer


def qwen2_vl_config(tokenizer, hidden_size: int, intermediate_size: int, num_layers: int, num_heads: int,
                    num_kv_heads: int, vision_depth: int, vision_dim: int) -> Qwen2VLConfig:
    start, pad, end = tokenizer.convert_tokens_to_ids(VISION_TOKENS)
    head_dim = hidden_size // num_heads
    # M-RoPE: the head_dim / 2 rotary frequencies split between time, height and width, 2 : 3 : 3 as in Qwen2-VL
    section = [head_dim // 8, head_dim // 8 * 3 // 2, head_dim // 8 * 3 // 2]
    section[0] += head_dim // 2 - sum(section)
    text = dict(vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=intermediate_size,
                num_hidden_layers=num_layers, num_attention_heads=num_heads, num_key_value_heads=num_kv_heads,
                max_position_embeddings=512, bos_token_id=tokenizer.bos_token_id,
                eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                rope_parameters={"rope_type": "default", "mrope_section": section, "rope_theta": 10000.0})
    vision = dict(depth=vision_depth, embed_dim=vision_dim, hidden_size=hidden_size, num_heads=2, patch_size=14,
                  spatial_merge_size=2, temporal_patch_size=2)
    return Qwen2VLConfig(text_config=text, vision_config=vision, image_token_id=pad, video_token_id=pad,  # no video
                         vision_start_token_id=start, vision_end_token_id=end, tie_word_embeddings=True)


def save_tiny_qwen2_vl(out: str | os.PathLike, seed: int = 0, **shape) -> Path:
    """A randomly initialised tiny Qwen2-VL (fp32) with its tokenizer and image processor, saved offline."""
    out = Path(out)
    tokenizer = build_vision_tokenizer()
    torch.manual_seed(seed)
    model = Qwen2VLForConditionalGeneration(qwen2_vl_config(tokenizer, **{**TINY_VL_SHAPE, **shape}))
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    Qwen2VLImageProcessorPil(min_pixels=28 * 28, max_pixels=112 * 112).save_pretrained(out)
    return out


def load_image_processor(path: str | os.PathLike):
    """The model directory's image processor (the PIL backend where torchvision is absent)."""
    return AutoImageProcessor.from_pretrained(path)
