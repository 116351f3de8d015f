"""A vision tower run once per distinct picture. A group's samples share their picture, so a batch carries each
picture's patches once, with `slots`: for every picture in row order, the index of its distinct picture. Two
PyTorch module hooks, held only for one forward, give the tower the distinct pictures' grid and repeat its merged
output for every slot; transformers' forward around it is unchanged (its split by the full grid, its placeholder
check). Gradients of a trainable tower add up over the slots, as they would over copies."""

from __future__ import annotations

from contextlib import contextmanager

import torch


def vision_tower(model) -> torch.nn.Module:
    """The tower of a Qwen2-VL / Qwen2.5-VL policy, inside a DeepSpeed engine or PEFT's LoRA wrapper too."""
    inner = getattr(model, "module", model)
    inner = inner.get_base_model() if hasattr(inner, "get_base_model") else inner
    return inner.model.visual


@contextmanager
def shared_pictures(model, slots: tuple[int, ...] | None):
    """Within: the model's tower runs over the distinct pictures only (slots None: nothing changes)."""
    if slots is None:
        yield
        return
    tower = vision_tower(model)
    first = [slots.index(d) for d in range(max(slots) + 1)]  # the slot whose grid each distinct picture takes
    merge = tower.spatial_merge_size ** 2

    def before(module, args, kwargs):
        grid = kwargs["grid_thw"]
        if len(grid) != len(slots):
            raise ValueError(f"{len(grid)} pictures in the batch's grid but {len(slots)} picture slots")
        return args, {**kwargs, "grid_thw": grid[first]}

    def after(module, args, kwargs, output):
        sizes = (kwargs["grid_thw"].prod(-1) // merge).tolist()
        pieces = torch.split(output.pooler_output, sizes)
        output.pooler_output = torch.cat([pieces[d] for d in slots])
        return output

    handles = [tower.register_forward_pre_hook(before, with_kwargs=True),
               tower.register_forward_hook(after, with_kwargs=True)]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
