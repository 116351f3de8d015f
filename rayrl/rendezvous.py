"""Rendezvous helpers without Ray: a free TCP port, and where a group meets on a loopback-only cluster (one
machine), a file rather than a TCP store, since a TCP store listens on every interface whatever address it is
given. The Ray task that finds a node's address lives in rayrl.placement.address."""

from __future__ import annotations

import socket
import tempfile
from pathlib import Path

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def free_port(host: str = "") -> int:
    """A TCP port free on this machine now (the OS picks it)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def rendezvous_file(key: str) -> str:
    return str(Path(tempfile.gettempdir()) / f"rayrl-rendezvous-{key}")


def init_method(addr: str, port: int, key: str) -> str:
    """torch.distributed's init_method: a file on a loopback-only cluster, else the TCP store at addr:port."""
    return f"file://{rendezvous_file(key)}" if addr in LOOPBACK else f"tcp://{addr}:{port}"
