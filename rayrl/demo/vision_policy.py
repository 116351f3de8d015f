"""A tiny Qwen2-VL-shaped policy built offline: a small vision tower, the character tokenizer with Qwen2-VL's image
markup, and its image processor (PIL backend) sized for the demo's small pictures; warmed up on the visual task."""

from __future__ import annotations

import os
from pathlib import Path

import torch
from transformers import AutoImageProcessor, Qwen2VLConfig, Qwen2VLForConditionalGeneration
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

from rayrl.config import DataConfig, DemoConfig
from rayrl.demo.warmup import supervised_warmup, task_rows
from rayrl.models.tokenizer import CHARS, build_char_tokenizer
from rayrl.models.vision import VIDEO_PAD, VISION_TOKENS, VisionTokens, expand_placeholders, image_token_types, process_images

TINY_VL_SHAPE = dict(hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4, num_kv_heads=2,
                     vision_depth=2, vision_dim=32)


def build_vision_tokenizer(chars: list[str] = CHARS):
    """One token per character plus the three image-markup tokens and Qwen2-VL's video pad (vLLM's processor
    looks it up; no task holds a video) as specials."""
    tokenizer = build_char_tokenizer(chars)
    tokenizer.add_special_tokens({"additional_special_tokens": [*VISION_TOKENS, VIDEO_PAD]})
    return tokenizer


def qwen2_vl_config(tokenizer, hidden_size: int, intermediate_size: int, num_layers: int, num_heads: int,
                    num_kv_heads: int, vision_depth: int, vision_dim: int,
                    max_position_embeddings: int = 512) -> Qwen2VLConfig:
    start, pad, end, video = tokenizer.convert_tokens_to_ids([*VISION_TOKENS, VIDEO_PAD])
    head_dim = hidden_size // num_heads
    # M-RoPE: the head_dim / 2 rotary frequencies split between time, height and width, 2 : 3 : 3 as in Qwen2-VL
    section = [head_dim // 8, head_dim // 8 * 3 // 2, head_dim // 8 * 3 // 2]
    section[0] += head_dim // 2 - sum(section)
    text = dict(vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=intermediate_size,
                num_hidden_layers=num_layers, num_attention_heads=num_heads, num_key_value_heads=num_kv_heads,
                max_position_embeddings=max_position_embeddings, bos_token_id=tokenizer.bos_token_id,
                eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                rope_parameters={"rope_type": "default", "mrope_section": section, "rope_theta": 10000.0})
    vision = dict(depth=vision_depth, embed_dim=vision_dim, hidden_size=hidden_size, num_heads=2, patch_size=14,
                  spatial_merge_size=2, temporal_patch_size=2)
    return Qwen2VLConfig(text_config=text, vision_config=vision, image_token_id=pad, video_token_id=video,
                         vision_start_token_id=start, vision_end_token_id=end, tie_word_embeddings=True)


def image_processor() -> Qwen2VLImageProcessorPil:
    """Sized for the demo's small pictures: at most 112 x 112 pixels, so a few image tokens each."""
    return Qwen2VLImageProcessorPil(min_pixels=28 * 28, max_pixels=112 * 112)


def save_tiny_qwen2_vl(out: str | os.PathLike, seed: int = 0, **shape) -> Path:
    """A randomly initialised tiny Qwen2-VL (fp32) with its tokenizer and image processor, saved offline."""
    out = Path(out)
    tokenizer = build_vision_tokenizer()
    torch.manual_seed(seed)
    model = Qwen2VLForConditionalGeneration(qwen2_vl_config(tokenizer, **{**TINY_VL_SHAPE, **shape}))
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    image_processor().save_pretrained(out)
    return out


def build_vision_policy(demo: DemoConfig, data: DataConfig):
    """(model, tokenizer, image processor): the demo's vision-language policy for data.task=visual_arithmetic,
    demo.* sizing the language model, demo.vision_depth and demo.vision_dim the vision tower, warmed up
    supervised (every weight) on the training pictures."""
    from rayrl.data.visual_arithmetic import split_visual

    tokenizer, processor = build_vision_tokenizer(), image_processor()
    config = qwen2_vl_config(
        tokenizer, hidden_size=demo.hidden_size, intermediate_size=demo.intermediate_size, num_layers=demo.num_layers,
        num_heads=demo.num_heads, num_kv_heads=demo.num_kv_heads, vision_depth=demo.vision_depth,
        vision_dim=demo.vision_dim, max_position_embeddings=demo.max_position_embeddings)
    # the weights are drawn for the vocabulary without the video pad (the last token), then its row is added: the
    # same draws as before vLLM's processor needed that token. The recipe's held-out gain depends on the draws
    # (docs/vision.md lists the builds measured)
    config.text_config.vocab_size = len(tokenizer) - 1
    torch.manual_seed(demo.seed)
    model = Qwen2VLForConditionalGeneration(config)
    model.resize_token_embeddings(len(tokenizer))
    train, _ = split_visual(data.min_operand, data.max_operand, data.eval_size, data.seed)
    vt = VisionTokens.of(tokenizer, processor)
    inputs = [process_images(t.images, processor) for t in train]
    rows = []
    for (ids, labels), x, t in zip(task_rows(tokenizer, train), inputs, train):
        full = expand_placeholders(ids, x, vt, t.id)  # labels stay on the answer: the prompt grew by image tokens
        rows.append((full, [-100] * (len(full) - len(ids)) + labels))

    def images(picked: list[int], ids: torch.Tensor) -> dict:
        return {"pixel_values": torch.cat([inputs[i].pixel_values for i in picked]),
                "image_grid_thw": torch.cat([inputs[i].image_grid_thw for i in picked]),
                "mm_token_type_ids": image_token_types(ids, vt)}

    supervised_warmup(model, tokenizer, rows, demo, images)
    return model, tokenizer, processor


def load_image_processor(path: str | os.PathLike):
    """The model directory's image processor (the PIL backend where torchvision is absent)."""
    return AutoImageProcessor.from_pretrained(path)
