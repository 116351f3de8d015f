"""Images on the vLLM engine (Qwen2-VL family): a request's PNGs go in as vLLM's multimodal data beside the
prompt's token ids, where each image placeholder holds one pad token; vLLM's own processor expands it, and the
expanded ids it returns are the sample's prompt, as the learner reads it. A drawn image-markup token ends the
sample before it, as on the hf engine."""

from __future__ import annotations

from rayrl.config import VLLMConfig
from rayrl.models.vision import decode
from rayrl.types import GenerationRequest

MARKUP_KEYS = ("vision_start_token_id", "image_token_id", "vision_end_token_id", "video_token_id")


def image_markup(hf_config: dict) -> list[int]:
    """The markup token ids of a vision-language model's config.json ([] for a text-only model)."""
    if "vision_config" not in hf_config:
        return []
    return sorted({hf_config[k] for k in MARKUP_KEYS if hf_config.get(k) is not None})


def multimodal_args(v: VLLMConfig, hf_config: dict) -> dict:
    """A text-only model: no tokenizer in vLLM (token ids in, token ids out). A vision-language model: the
    tokenizer its processor needs, up to vllm.max_images_per_prompt images and no video per prompt (vLLM sizes
    its encoder cache and its start-up profile for them)."""
    if "vision_config" not in hf_config:
        return {"skip_tokenizer_init": True}
    return {"skip_tokenizer_init": False, "limit_mm_per_prompt": {"image": v.max_images_per_prompt, "video": 0}}


def engine_prompt(r: GenerationRequest) -> dict:
    """vLLM's prompt for a request: its token ids, and its images decoded for vLLM's processor."""
    prompt = {"prompt_token_ids": list(r.prompt_ids)}
    if r.images:
        prompt["multi_modal_data"] = {"image": [decode(png) for png in r.images]}
    return prompt


def sample_prompt_ids(r: GenerationRequest, final) -> list[int]:
    """The prompt a request's samples carry: with images, vLLM's expanded one (an aborted request registered with
    vLLM still gets a final output that holds it); else the request's own."""
    return list(final.prompt_token_ids) if r.images and final is not None else list(r.prompt_ids)


class VLLMImages:
    """A model's image markup: stop tokens beside EOS, cut from the samples that drew them."""

    def __init__(self, hf_config: dict) -> None:
        self.markup = image_markup(hf_config)

    def cut(self, tokens: list[int], logprobs: list[float], reason: str) -> tuple[list[int], list[float], str]:
        """(tokens, log-probs, finish reason) ending before a drawn markup token (vLLM stopped on it)."""
        if tokens and tokens[-1] in self.markup:
            return tokens[:-1], logprobs[:len(tokens) - 1], "markup"
        return tokens, logprobs, reason
