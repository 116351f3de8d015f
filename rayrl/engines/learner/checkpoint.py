"""Pieces of a learner checkpoint every backend shares: the HF export and the small extra state."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModelForCausalLM


def export_hf(full_state: dict[str, torch.Tensor], config, tokenizer, out: Path) -> None:
    """Write a Hugging Face directory (config, safetensors, tokenizer) loadable by transformers and vLLM."""
    out.mkdir(parents=True, exist_ok=True)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    model.load_state_dict(full_state, strict=False, assign=True)
    model.tie_weights()
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


def save_extra_state(out: Path, scheduler, version: int) -> None:
    torch.save({"scheduler": scheduler.state_dict(), "version": version, "rng": torch.get_rng_state()},
               out / "extra_state.pt")


def load_extra_state(path: Path, scheduler) -> int:
    state = torch.load(path / "extra_state.pt", weights_only=False)
    scheduler.load_state_dict(state["scheduler"])
    torch.set_rng_state(state["rng"])
    return state["version"]
