"""Images in a policy's context, Qwen2-VL style: each image placeholder in the prompt expands to the number of
merged patches the image processor makes of it, and the model takes pixel values, the patch grid and which
positions are image tokens. The same inputs serve generation (hf engine) and the learner's forward."""

from __future__ import annotations

import io
from dataclasses import dataclass

import torch
from PIL import Image

VISION_TOKENS = ["<|vision_start|>", "<|image_pad|>", "<|vision_end|>"]  # Qwen2-VL's names
PLACEHOLDER = "".join(VISION_TOKENS)  # one image's place in a prompt, before expansion


@dataclass(frozen=True)
class VisionTokens:
    """The ids of a vision-language tokenizer's image markup and the processor's patch merge factor."""

    start: int
    pad: int
    end: int
    merge: int  # merged patches per side (Qwen2-VL: 2, so one token per 2 x 2 patches)

    @classmethod
    def of(cls, tokenizer, processor) -> "VisionTokens":
        start, pad, end = tokenizer.convert_tokens_to_ids(VISION_TOKENS)
        if tokenizer.unk_token_id in (start, pad, end):
            raise ValueError(f"the tokenizer has no image markup {VISION_TOKENS}: the model is not a vision-language "
                             "model, or its tokenizer was saved without them")
        return cls(start=start, pad=pad, end=end, merge=processor.merge_size)


@dataclass
class ImageInputs:
    """A prompt's images as the model takes them: pixel values of every patch and each image's (t, h, w) grid."""

    pixel_values: torch.Tensor
    image_grid_thw: torch.Tensor

    def tokens_per_image(self, merge: int) -> list[int]:
        return [int(t * h * w) // (merge * merge) for t, h, w in self.image_grid_thw.tolist()]


def decode(png: bytes) -> Image.Image:
    """Encoded image bytes (a task's PNG) as an RGB picture for an image processor."""
    return Image.open(io.BytesIO(png)).convert("RGB")


def process_images(images: tuple[bytes, ...], processor) -> ImageInputs:
    """A task's PNG images through the model's image processor."""
    out = processor(images=[decode(png) for png in images], return_tensors="pt")
    return ImageInputs(pixel_values=out["pixel_values"], image_grid_thw=out["image_grid_thw"])


def expand_placeholders(prompt_ids: list[int], inputs: ImageInputs, vt: VisionTokens, task_id: str) -> list[int]:
    """The prompt with each image's single pad token repeated once per merged patch; the number of
    placeholders must equal the number of images."""
    counts = inputs.tokens_per_image(vt.merge)
    pads = [i for i, t in enumerate(prompt_ids) if t == vt.pad]
    if len(pads) != len(counts):
        raise ValueError(f"task {task_id!r}: {len(pads)} image placeholder(s) in the prompt for {len(counts)} "
                         f"image(s); write one {PLACEHOLDER} per image")
    out: list[int] = []
    images = iter(counts)
    for t in prompt_ids:
        out.extend([t] * next(images) if t == vt.pad else [t])
    return out


def image_token_types(ids: torch.Tensor, vt: VisionTokens) -> torch.Tensor:
    """1 where a position holds an image token, else 0: what the model needs for its 3-D rotary positions."""
    return (ids == vt.pad).to(torch.int32)


def check_vision_model(config, task_id: str) -> None:
    """Refuse images for a model without a vision tower, naming the task that carries them."""
    if getattr(config, "vision_config", None) is None:
        raise ValueError(f"task {task_id!r} carries images but the model ({type(config).__name__}, "
                         f"{getattr(config, 'model_type', '?')}) has no vision tower; use a vision-language model "
                         "(Qwen2-VL / Qwen2.5-VL family) or tasks without images")
