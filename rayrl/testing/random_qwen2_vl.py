"""A randomly initialised Qwen2.5-VL of a real shape (3B) with the demo's character tokenizer (its image markup and
video pad), and an image processor sized for the pictures it will see, saved offline: the GPU benchmark's
vision-language policy, where weights need not mean anything."""

from __future__ import annotations

import os
from pathlib import Path

import torch
from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration, Qwen2VLImageProcessorPil

from rayrl.demo.vision_policy import build_vision_tokenizer
from rayrl.models.tokenizer import CHARS
from rayrl.models.vision import VIDEO_PAD, VISION_TOKENS

# Qwen2.5-VL-3B-Instruct's published shape; the vocabulary is the tokenizer's own (as the text benchmarks' models)
QWEN2_5_VL_3B_TEXT = dict(hidden_size=2048, intermediate_size=11008, num_hidden_layers=36, num_attention_heads=16,
                          num_key_value_heads=2, rope_parameters={"rope_type": "default", "rope_theta": 1e6,
                                                                  "mrope_section": [16, 24, 24]})
QWEN2_5_VL_3B_VISION = dict(depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16, out_hidden_size=2048,
                            patch_size=14, spatial_merge_size=2, temporal_patch_size=2, window_size=112,
                            fullatt_block_indexes=[7, 15, 23, 31], tokens_per_second=2)


def save_random_qwen2_5_vl(out: str | os.PathLike, max_pixels: int, dtype=torch.bfloat16, device: str = "cpu",
                           chars: list[str] = CHARS, text: dict | None = None, vision: dict | None = None) -> Path:
    """The model (text and vision shapes default to the 3B's), tokenizer and a PIL image processor that keeps
    pictures up to max_pixels as they are; initialised on `device` (a GPU makes 3B parameters in seconds)."""
    out = Path(out)
    tokenizer = build_vision_tokenizer(chars)
    start, pad, end, video = tokenizer.convert_tokens_to_ids([*VISION_TOKENS, VIDEO_PAD])
    text = {**QWEN2_5_VL_3B_TEXT, **(text or {}), "vocab_size": len(tokenizer), "max_position_embeddings": 4096,
            "bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id,
            "pad_token_id": tokenizer.pad_token_id}
    config = Qwen2_5_VLConfig(text_config=text, vision_config={**QWEN2_5_VL_3B_VISION, **(vision or {})},
                              image_token_id=pad, video_token_id=video, vision_start_token_id=start,
                              vision_end_token_id=end, tie_word_embeddings=True)
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen2_5_VLForConditionalGeneration(config).to(dtype)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    merge = 28  # patch 14 x merge 2: the processor's resizing factor
    Qwen2VLImageProcessorPil(min_pixels=merge * merge, max_pixels=max_pixels).save_pretrained(out)
    return out
