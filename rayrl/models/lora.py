"""LoRA adapters through PEFT: the same wrapping on the learner and on the hf rollout engine, so the adapter
tensors a weight sync carries have the same names on both sides; the merged model and the adapter directory
for export."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from rayrl.config import LoraConfig

ADAPTER_MARK = ".lora_"  # lora_A / lora_B: the only parameters a LoRA learner trains and syncs
ADAPTER_DIR = "adapter"  # beside a checkpoint's merged export: PEFT's adapter directory
PEFT_PREFIX = "base_model.model."  # what PEFT's wrapping puts before the plain model's parameter names


def linear_names(model: nn.Module) -> set[str]:
    return {name.rsplit(".", 1)[-1] for name, m in model.named_modules() if isinstance(m, nn.Linear)}


def check_targets(model: nn.Module, targets: list[str]) -> None:
    """PEFT is installed and every target module names linear layers of the model (a skeleton will do)."""
    try:
        import peft  # noqa: F401
    except ImportError:
        raise ImportError("lora.enabled=true needs PEFT: pip install 'rayrl[lora]'") from None
    names = linear_names(model)
    missing = [t for t in targets if t not in names]
    if missing:
        raise ValueError(f"lora.target_modules {missing} name no linear layer of {type(model).__name__}; "
                         f"it has {sorted(names - {'lm_head'})}")


def add_adapters(model: nn.Module, section: LoraConfig) -> nn.Module:
    """The model wrapped by PEFT with fresh adapters on section.target_modules (B = 0: the base's outputs);
    everything else frozen."""
    check_targets(model, section.target_modules)
    from peft import LoraConfig as PeftLoraConfig
    from peft import get_peft_model

    peft_config = PeftLoraConfig(r=section.rank, lora_alpha=section.alpha, lora_dropout=section.dropout,
                                 target_modules=list(section.target_modules), bias="none", task_type="CAUSAL_LM")
    return get_peft_model(model, peft_config)


def is_adapter(name: str) -> bool:
    return ADAPTER_MARK in name


def export_adapter(model: nn.Module, adapters: dict[str, torch.Tensor], out: Path) -> None:
    """PEFT's adapter directory (adapter_config.json, adapter_model.safetensors) from the full adapter tensors,
    loadable by PEFT and by vLLM's --lora-modules."""
    model.save_pretrained(str(out), state_dict=adapters)


def merged_state(full: dict[str, torch.Tensor], section: LoraConfig) -> dict[str, torch.Tensor]:
    """The full state of a PEFT-wrapped model as the plain model's, each adapted weight W + alpha / r · B·A
    (what PEFT's merge_and_unload computes), from full tensors (any backend, gathered)."""
    scale = section.alpha / section.rank
    out = {}
    for name, tensor in full.items():
        if is_adapter(name):
            continue
        plain = name.removeprefix(PEFT_PREFIX).replace(".base_layer.", ".")
        stem = name.removesuffix(".base_layer.weight")
        if stem != name:
            a, b = full[f"{stem}.lora_A.default.weight"], full[f"{stem}.lora_B.default.weight"]
            tensor = (tensor.float() + scale * (b.float() @ a.float())).to(tensor.dtype)
        out[plain] = tensor
    return out
