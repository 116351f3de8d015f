"""A node's rendezvous address: its IP, a free TCP port on it and a unique key, found by a task placed on
that node (pin it to a bundle to pick the node). The Ray-free helpers are in rayrl.rendezvous."""

from __future__ import annotations

import uuid

import ray

from rayrl.rendezvous import free_port


@ray.remote(num_cpus=0)
def node_address() -> tuple[str, int, str]:
    """(address of the node this task runs on, a free port there, a key unique to this rendezvous)."""
    return ray.util.get_node_ip_address(), free_port(), uuid.uuid4().hex
