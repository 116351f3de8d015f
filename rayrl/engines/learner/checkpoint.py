"""The Hugging Face export every learner checkpoint carries, loadable by transformers and vLLM."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModelForCausalLM


def export_hf(full_state: dict[str, torch.Tensor], config, tokenizer, out: Path) -> None:
    """Write config, safetensors and tokenizer into out."""
    out.mkdir(parents=True, exist_ok=True)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    model.load_state_dict(full_state, strict=False, assign=True)
    model.tie_weights()
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
