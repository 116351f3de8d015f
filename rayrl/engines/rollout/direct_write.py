"""Writes the learner's tensors straight into a rollout engine's parameters, with no loader in between.

The learner sends Hugging Face names (q_proj, k_proj, v_proj, gate_proj, up_proj); vLLM fuses some
of them into one parameter (qkv_proj, gate_up_proj), declared by its model's packed_modules_mapping.
The map from learner names to (parameter, rows) is computed once per bucket plan. It is used only when
it writes every parameter of the engine exactly, in the shape the engine holds it (no tensor-parallel
shards, no quantized or repacked layouts); otherwise the engine's own load_weights is the way in.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec
import torch

from rayrl.engines.transport.base import TensorSpec


class Slot(msgspec.Struct, frozen=True):
    """The learner's tensor `name` is rows [start, stop) of the engine's parameter `param`."""

    name: str
    param: str
    start: int
    stop: int


def _target(name: str, rows: dict[str, int], params: dict[str, torch.Tensor],
            packed: dict[str, list[str]]) -> tuple[str, int] | None:
    """(engine parameter, first row) for one learner tensor, or None."""
    if name in params:
        return name, 0
    for fused, parts in packed.items():
        for i, part in enumerate(parts):
            token = f".{part}."
            if token not in name:
                continue
            target = name.replace(token, f".{fused}.")
            before = [name.replace(token, f".{p}.") for p in parts[:i]]
            if target in params and all(b in rows for b in before):
                return target, sum(rows[b] for b in before)
    return None


def plan_slots(specs: list[TensorSpec], params: dict[str, torch.Tensor], packed: dict[str, list[str]],
               vocab_rows: dict[str, int] | None = None) -> tuple[list[Slot] | None, str]:
    """Slots for every spec, or (None, why) when the direct write would not reproduce load_weights.
    vocab_rows: parameters padded past the real vocabulary (vLLM pads embeddings to a multiple of 64)
    and their real row count; the padding rows are never read, and DirectWriter zeroes them."""
    vocab_rows = vocab_rows or {}
    rows = {s.name: (s.shape[0] if s.shape else 1) for s in specs}
    filled: dict[str, int] = {}
    slots = []
    for s in specs:
        found = _target(s.name, rows, params, packed)
        if found is None:
            return None, f"'{s.name}' has no parameter of the engine"
        param, start = found
        p = params[param]
        stop = start + rows[s.name]
        if tuple(p.shape[1:]) != tuple(s.shape[1:]) or stop > p.shape[0] or not p.is_contiguous():
            return None, f"'{s.name}' {tuple(s.shape)} does not fit rows {start}:{stop} of '{param}' {tuple(p.shape)}"
        slots.append(Slot(s.name, param, start, stop))
        filled[param] = filled.get(param, 0) + (stop - start)
    missing = [n for n, p in params.items() if filled.get(n, 0) != vocab_rows.get(n, p.shape[0] if p.dim() else 1)]
    if missing:
        return None, f"{len(missing)} engine parameters would not be written fully, e.g. '{missing[0]}'"
    return slots, ""


class DirectWriter:
    """Writes a plan's tensors into the engine's parameter rows with one fused copy (torch._foreach_copy_):
    per-tensor Python would cost more than the copy itself. The destination rows are sliced once and
    again only if a parameter moved (vLLM's sleep mode keeps their addresses across sleep and wake)."""

    def __init__(self, slots: list[Slot], vocab_rows: dict[str, int] | None = None) -> None:
        self.slots, self.vocab_rows = slots, vocab_rows or {}
        self._where: tuple[int, ...] = ()
        self._rows: list[torch.Tensor] = []
        self._padding: list[torch.Tensor] = []

    def write(self, params: dict[str, torch.Tensor], named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        sources = []
        for slot, (name, tensor) in zip(self.slots, named_tensors, strict=True):
            if name != slot.name:
                raise ValueError(f"weight order changed: expected {slot.name}, got {name}")
            sources.append(tensor)
        where = tuple(p.data_ptr() for p in params.values())
        if where != self._where:
            self._rows = [params[s.param].data[s.start: s.stop] for s in self.slots]
            self._padding = [params[n].data[rows:] for n, rows in self.vocab_rows.items() if rows < params[n].shape[0]]
            self._where = where
        with torch.no_grad():
            torch._foreach_copy_(self._rows, sources)
            if self._padding:  # freed memory after a level-2 sleep: keep it finite
                torch._foreach_zero_(self._padding)
