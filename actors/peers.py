"""Actors that another actor talks to, given by handle or by name. A restartable actor takes its peers by name:
Ray keeps a handle among the constructor's arguments in its object store (and says so at error level), and a
restart would need it again; a name is resolved in the constructor, at every start."""

from __future__ import annotations

import ray


def peer(ref, namespace: str | None):
    """The handle itself, the named actor in `namespace` (a str), or None."""
    return ray.get_actor(ref, namespace=namespace) if isinstance(ref, str) else ref
