"""The Hugging Face export every learner checkpoint carries, loadable by transformers and vLLM."""

from __future__ import annotations

from pathlib import Path

import torch

from rayrl.models.policy import model_class


def export_hf(full_state: dict[str, torch.Tensor], config, tokenizer, out: Path, processor=None) -> None:
    """Write config, safetensors and tokenizer (and a vision-language model's image processor) into out."""
    out.mkdir(parents=True, exist_ok=True)
    if processor is not None:
        processor.save_pretrained(out)
    with torch.device("meta"):
        model = model_class(config).from_config(config)
    model.load_state_dict(full_state, strict=False, assign=True)
    model.tie_weights()
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
