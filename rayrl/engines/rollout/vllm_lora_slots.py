"""Adapter tensors written straight into vLLM's LoRA buffers (the slot the policy's adapter holds), in vLLM's
worker process: no adapter directory, no reload. vLLM keeps each LoRA layer's adapters stacked per slot
(lora_a_stacked[slice][slot, 0, :rank, :in], lora_b_stacked[slice][slot, 0, :out, :rank], B scaled by
alpha / rank); fused layers (qkv_proj, gate_up_proj) hold one slice per Hugging Face module."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from rayrl.engines.transport.vllm_side import from_wire

LORA_ID = 1  # the policy's one adapter slot id in vLLM
PREFIX = "base_model.model."  # PEFT's wrapper around the Hugging Face model


class LoraSlots:
    """The map from the learner's adapter tensor names to (vLLM LoRA layer, slice, A or B), built from vLLM's
    LoRA layers and its model's packed_modules_mapping; write() copies one sync's tensors into the slot."""

    def __init__(self, manager, packed: dict[str, list[str]]) -> None:
        self.manager, self.packed = manager, packed
        self.targets: dict[str, tuple[object, int, str]] = {}

    def _target(self, name: str) -> tuple[object, int, str]:
        """(layer, slice, 'a' or 'b') for 'base_model.model.<module>.lora_A.weight' (or lora_B)."""
        if name not in self.targets:
            module, _, kind = name.removeprefix(PREFIX).replace(".default.weight", ".weight").rpartition(".lora_")
            kind = {"A.weight": "a", "B.weight": "b"}.get(kind)
            found = (self.manager.modules.get(module), 0) if module in self.manager.modules else None
            parent, _, leaf = module.rpartition(".")
            for fused, parts in self.packed.items():
                if found is None and leaf in parts and f"{parent}.{fused}" in self.manager.modules:
                    found = (self.manager.modules[f"{parent}.{fused}"], parts.index(leaf))
            if found is None or kind is None:
                raise ValueError(f"adapter tensor '{name}' has no LoRA layer in the engine")
            self.targets[name] = (*found, kind)
        return self.targets[name]

    def write(self, named: Iterable[tuple[str, torch.Tensor]], scaling: float) -> int:
        """Every tensor into the active slot of LORA_ID; returns how many were written."""
        slot = self.manager.lora_index_to_id.index(LORA_ID)  # ValueError: the adapter was never activated
        destinations, sources = [], []
        for name, tensor in named:
            layer, i, kind = self._target(name)
            stacked = (layer.lora_a_stacked if kind == "a" else layer.lora_b_stacked)[i][slot, 0]
            rows, cols = tensor.shape
            if rows > stacked.shape[0] or cols > stacked.shape[1]:
                raise ValueError(f"adapter tensor '{name}' {tuple(tensor.shape)} does not fit the engine's "
                                 f"{tuple(stacked.shape)}")
            destinations.append(stacked[:rows, :cols])
            sources.append(tensor.to(stacked.dtype) * scaling if kind == "b" else tensor.to(stacked.dtype))
        with torch.no_grad():
            torch._foreach_copy_(destinations, [s.to(d.device) for s, d in zip(sources, destinations)])
        return len(destinations)


class LoraSlotsExtension:
    """Mixed into vLLM's worker (worker_extension_cls): the in-place adapter write after the first sync."""

    def _rayrl_model(self):
        """The worker's model (vLLM's model runner hands it out by get_model() where it has one)."""
        runner = self.model_runner
        return runner.get_model() if hasattr(runner, "get_model") else runner.model

    def _rayrl_lora_slots(self) -> LoraSlots:
        if not hasattr(self, "_rayrl_slots"):
            manager = self.model_runner.lora_manager._adapter_manager
            self._rayrl_slots = LoraSlots(manager, getattr(self._rayrl_model(), "packed_modules_mapping", {}) or {})
        return self._rayrl_slots

    def rayrl_write_lora(self, items: list, scaling: float) -> int:
        """The adapters carried by vLLM's RPC (to_wire's form; gloo and nccl transports, CPU engines)."""
        return self._rayrl_lora_slots().write(from_wire(items), scaling)
