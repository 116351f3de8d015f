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
VIDEO_PAD = "<|video_pad|>"  # never in a rayrl prompt, but Qwen2-VL tokenizers (and vLLM's processor) have it


@dataclass(frozen=True)
class VisionTokens:
    """The ids of a vision-language tokenizer's image markup and the processor's patch merge factor."""

    start: int
    pad: int
    end: int
    merge: int  # merged patches per side (Qwen2-VL: 2, so one token per 2 x 2 patches)
    video: int | None = None  # the video pad, where the tokenizer has one

    @property
    def markup(self) -> list[int]:
        """Tokens only a prompt's images (or videos) hold: a sample that draws one ends before it (finish_reason
        "markup"), since the learner's forward would take it for an image's place."""
        return [self.start, self.pad, self.end, *([] if self.video is None else [self.video])]

    @classmethod
    def of(cls, tokenizer, processor) -> "VisionTokens":
        start, pad, end = tokenizer.convert_tokens_to_ids(VISION_TOKENS)
        if tokenizer.unk_token_id in (start, pad, end):
            raise ValueError(f"the tokenizer has no image markup {VISION_TOKENS}: the model is not a vision-language "
                             "model, or its tokenizer was saved without them")
        video = tokenizer.convert_tokens_to_ids(VIDEO_PAD)
        return cls(start=start, pad=pad, end=end, merge=processor.merge_size,
                   video=None if video == tokenizer.unk_token_id else video)


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


def expanded_image_tokens(images: tuple[bytes, ...], processor) -> int:
    """The image tokens a task's pictures expand to, summed over its placeholders, from each picture's size alone
    (nothing processed)."""
    merge = processor.merge_size ** 2
    sizes = [Image.open(io.BytesIO(png)).size for png in images]  # (width, height), read from the header
    return sum(processor.get_number_of_image_patches(h, w, {}) // merge for w, h in sizes)


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


def mrope_positions(ids: list[int], grids: list[tuple[int, int, int]], vt: VisionTokens) -> torch.Tensor:
    """[3, len(ids)] rotary positions (time, height, width) of one unpadded sequence, Qwen2-VL's rule: text
    counts up on all three; an image's tokens sit on its merged patch grid from where the text stopped, and
    the text after it resumes past the grid's longer side. The hf engine and the learner both use this."""
    out, at, images, i = [], 0, iter(grids), 0
    while i < len(ids):
        if ids[i] != vt.pad:
            j = next((k for k in range(i, len(ids)) if ids[k] == vt.pad), len(ids))
            out.append(torch.arange(at, at + j - i).expand(3, -1))
            at, i = at + j - i, j
            continue
        t, h, w = next(images)
        h, w = h // vt.merge, w // vt.merge
        grid = torch.stack(torch.meshgrid(torch.arange(t), torch.arange(h), torch.arange(w), indexing="ij"))
        out.append(grid.reshape(3, -1) + at)
        at, i = at + max(h, w), i + t * h * w
    return torch.cat(out, 1) if out else torch.zeros(3, 0, dtype=torch.long)


def image_token_types(ids: torch.Tensor, vt: VisionTokens) -> torch.Tensor:
    """1 where a position holds an image token, else 0: what the model needs for its 3-D rotary positions."""
    return (ids == vt.pad).to(torch.int32)


@dataclass(frozen=True)
class VisionPrompts:
    """A vision-language policy's image processor and markup: turns a prompt with placeholders and its images
    into the expanded token ids, the model's image inputs and the 3-D rotary positions."""

    processor: object
    tokens: VisionTokens

    @classmethod
    def load(cls, path, config, tokenizer) -> "VisionPrompts | None":
        """None for a text-only model (its config has no vision tower)."""
        if getattr(config, "vision_config", None) is None:
            return None
        from transformers import AutoImageProcessor

        processor = AutoImageProcessor.from_pretrained(path)
        return cls(processor, VisionTokens.of(tokenizer, processor))

    def prepare(self, prompt_ids: list[int], images: tuple[bytes, ...], task_id: str
                ) -> tuple[list[int], ImageInputs | None]:
        """(expanded ids, image inputs); a prompt without images passes through (its placeholders counted)."""
        if not images:
            if self.tokens.pad in prompt_ids:
                raise ValueError(f"task {task_id!r}: image placeholders in the prompt but no images")
            return list(prompt_ids), None
        inputs = process_images(images, self.processor)
        return expand_placeholders(prompt_ids, inputs, self.tokens, task_id), inputs

    def positions(self, ids: list[int], inputs: ImageInputs | None) -> torch.Tensor:
        grids = [] if inputs is None else [tuple(g) for g in inputs.image_grid_thw.tolist()]
        return mrope_positions(ids, grids, self.tokens)


def attach_images(batch, vision: "VisionPrompts | None") -> None:
    """A collated batch's rows get their image inputs and 3-D positions (each distinct image tuple processed
    once); a row's image tokens must be as many as its images make. Text-only batches are left alone."""
    if batch.images is None:
        return
    if vision is None:
        raise ValueError("a training batch carries images but the policy has no vision tower")
    lengths = batch.attention_mask.sum(-1).tolist()
    processed: dict[int, ImageInputs | None] = {}
    batch.image_inputs, batch.rope_positions = [], torch.zeros(3, *batch.input_ids.shape, dtype=torch.long)
    for b, images in enumerate(batch.images):
        key = id(images)
        if key not in processed:
            processed[key] = process_images(images, vision.processor) if images else None
        inputs = processed[key]
        ids = batch.input_ids[b, : lengths[b]].tolist()
        want = sum(inputs.tokens_per_image(vision.tokens.merge)) if inputs is not None else 0
        if ids.count(vision.tokens.pad) != want:
            raise ValueError(f"batch row {b}: {ids.count(vision.tokens.pad)} image tokens for images that make {want}")
        batch.image_inputs.append(inputs)
        batch.rope_positions[:, b, : lengths[b]] = vision.positions(ids, inputs)


def stack_images(inputs: list[ImageInputs | None]) -> tuple[dict[str, torch.Tensor], tuple[int, ...] | None]:
    """Several sequences' image inputs in their order, as the model's keyword arguments ({} if none), and the
    picture slots of rayrl.models.shared_pictures: rows holding the same ImageInputs (a group's samples) carry
    its patches once, while the grid keeps every row's pictures."""
    present = [x for x in inputs if x is not None]
    if not present:
        return {}, None
    start: dict[int, int] = {}  # id of a distinct ImageInputs -> its first picture's index among distinct pictures
    patches, slots, distinct = [], [], 0
    for x in present:
        if id(x) not in start:
            start[id(x)], distinct = distinct, distinct + len(x.image_grid_thw)
            patches.append(x.pixel_values)
        slots.extend(range(start[id(x)], start[id(x)] + len(x.image_grid_thw)))
    return ({"pixel_values": torch.cat(patches), "image_grid_thw": torch.cat([x.image_grid_thw for x in present])},
            tuple(slots))


def check_vision_model(config, task_id: str) -> None:
    """Refuse images for a model without a vision tower, naming the task that carries them."""
    if getattr(config, "vision_config", None) is None:
        raise ValueError(f"task {task_id!r} carries images but the model ({type(config).__name__}, "
                         f"{getattr(config, 'model_type', '?')}) has no vision tower; use a vision-language model "
                         "(Qwen2-VL / Qwen2.5-VL family) or tasks without images")
