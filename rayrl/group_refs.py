"""Where a finished group waits in Ray's object store, as the buffer hands it out: `[ref]` (the object is the
group) or `[ref, i]` (the object holds the groups one hand-over brought; this is the i-th). Each is a list so
that Ray passes the reference, not the data. A hand-over's groups share one object because a ray.put costs
about a millisecond of CPU however small the object: per group, that is a large share of a small step."""

from __future__ import annotations

import ray

from rayrl.types import TrajectoryGroup


def put_groups(groups: list[TrajectoryGroup]) -> list[list]:
    """One object for all of them (the calling process owns it); where each one is, in order."""
    if len(groups) <= 1:
        return [[ray.put(g)] for g in groups]
    ref = ray.put(list(groups))
    return [[ref, i] for i in range(len(groups))]


def get_groups(wrapped: list[list]) -> list[TrajectoryGroup]:
    """The groups at these places, in order; each object fetched once."""
    refs = list(dict.fromkeys(w[0] for w in wrapped))
    values = dict(zip(refs, ray.get(refs)))
    return [values[w[0]] if len(w) == 1 else values[w[0]][w[1]] for w in wrapped]
