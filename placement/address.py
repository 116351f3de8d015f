"""Rendezvous addresses: a node's IP, a free TCP port on it and a unique key, found by a task placed on
that node. On a loopback-only cluster (one machine) the rendezvous is a file, not a TCP store: a TCP
store listens on every interface, whatever address it is given."""

from __future__ import annotations

import socket
import tempfile
import uuid
from pathlib import Path

import ray

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def free_port(host: str = "") -> int:
    """A TCP port free on this machine now (the OS picks it)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@ray.remote(num_cpus=0)
def node_address() -> tuple[str, int, str]:
    """(address of the node this task runs on, a free port there, a key unique to this rendezvous);
    pin it to a bundle to pick the node."""
    return ray.util.get_node_ip_address(), free_port(), uuid.uuid4().hex


def rendezvous_file(key: str) -> str:
    return str(Path(tempfile.gettempdir()) / f"rayrl-rendezvous-{key}")


def init_method(addr: str, port: int, key: str) -> str:
    """torch.distributed's init_method: a file on a loopback-only cluster, else the TCP store at addr:port."""
    return f"file://{rendezvous_file(key)}" if addr in LOOPBACK else f"tcp://{addr}:{port}"
