"""The checkpoint directory must be one directory for every node: each node writes a marker there,
then every node must see all the markers, or the run stops at once naming the node and the path."""

from __future__ import annotations

import os
from pathlib import Path

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from rayrl.checkpoint import StorageError

MARKER = ".node-"


@ray.remote(num_cpus=0)
def _write_marker(root: str, node_id: str) -> str:
    try:
        Path(root).mkdir(parents=True, exist_ok=True)
        (Path(root) / f"{MARKER}{node_id}").write_text(ray.util.get_node_ip_address())
    except OSError as err:
        return f"cannot write there ({err.strerror})"
    return ""


@ray.remote(num_cpus=0)
def _seen_markers(root: str) -> list[str]:
    try:
        return [n.removeprefix(MARKER) for n in os.listdir(root) if n.startswith(MARKER)]
    except OSError:
        return []


def unshared_error(root: str, nodes: dict[str, str], write_errors: dict[str, str],
                   seen: dict[str, list[str]]) -> str | None:
    """nodes: node id -> address. The message naming the first node that cannot use root, or None."""
    for node, problem in write_errors.items():
        if problem:
            return (f"checkpoint directory '{root}' on node {nodes[node]}: {problem}; set checkpoint.dir to a "
                    "path every node can write")
    for node, ids in seen.items():
        missing = sorted(nodes[n] for n in nodes if n not in ids)
        if missing:
            return (f"checkpoint directory '{root}' is not shared: node {nodes[node]} does not see the markers "
                    f"written by node(s) {', '.join(missing)}; set checkpoint.dir to storage every node mounts "
                    "at the same path (NFS, a cloud bucket mount)")
    return None


def check_shared(root: Path) -> None:
    """Run the marker check on every alive node of the cluster (nothing to do on one node)."""
    nodes = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]}
    if len(nodes) < 2:
        return
    on = {n: NodeAffinitySchedulingStrategy(n, soft=False) for n in nodes}
    errors = dict(zip(nodes, ray.get([_write_marker.options(scheduling_strategy=on[n]).remote(str(root), n)
                                       for n in nodes])))
    seen = {} if any(errors.values()) else dict(zip(nodes, ray.get(
        [_seen_markers.options(scheduling_strategy=on[n]).remote(str(root)) for n in nodes])))
    for n in nodes:
        (root / f"{MARKER}{n}").unlink(missing_ok=True)
    message = unshared_error(str(root), nodes, errors, seen)
    if message:
        raise StorageError(message)
