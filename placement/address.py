"""Rendezvous addresses: a node's IP and a free TCP port on it, found by a task placed on that node."""

from __future__ import annotations

import socket

import ray


def free_port(host: str = "") -> int:
    """A TCP port free on this machine now (the OS picks it)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@ray.remote(num_cpus=0)
def node_address() -> tuple[str, int]:
    """The address of the node this task runs on and a free port there; pin it to a bundle to pick the node."""
    return ray.util.get_node_ip_address(), free_port()
