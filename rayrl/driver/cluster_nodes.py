"""What the elastic fleet asks of the cluster: which nodes are alive, which are being drained (and by when), and
which have room for one more rollout worker. Ray answers the last two through its private state module (the
same calls `ray status` and Ray's autoscaler make); they are kept here, in one place."""

from __future__ import annotations

import ray
from ray._private import state as ray_state


def alive_nodes() -> dict[str, dict]:
    """Node id -> {labels, resources} of every alive node."""
    return {n["NodeID"]: {"labels": n.get("Labels") or {}, "resources": n.get("Resources") or {}}
            for n in ray.nodes() if n.get("Alive")}


def draining_nodes() -> dict[str, float]:
    """Node id -> the drain's deadline (seconds since the epoch; 0: none) of every node being drained."""
    return {node: ms / 1000.0 for node, ms in ray_state.state.get_draining_nodes().items()}


def nodes_with_room(labels: dict[str, str], cpus: float, gpus: float, skip: set[str]) -> list[str]:
    """Alive nodes outside `skip` (the caller's, draining ones among them) whose labels include `labels` and whose
    free resources hold a worker of `cpus` CPUs and `gpus` GPUs."""
    free = ray_state.available_resources_per_node()
    out = []
    for node, info in alive_nodes().items():
        if node in skip or any(info["labels"].get(k) != v for k, v in labels.items()):
            continue
        room = free.get(node, {})
        if room.get("CPU", 0.0) >= cpus and room.get("GPU", 0.0) >= gpus:
            out.append(node)
    return out
