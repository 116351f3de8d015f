"""ElasticScaler (rollout.fleet=elastic): every rollout.fleet_check_s the driver asks it to look at the cluster.
A worker on a node being drained leaves (it finishes what it holds until the drain's deadline); a node with room
for a worker, matching placement.rollout_node_labels and holding none of the fleet, gets one while the fleet is
below rollout.max_workers; it joins at a later look, once its engine answers (training goes on meanwhile). When
generation runs ahead of training for rollout.idle_leave_s, the last joined worker leaves, and none starts until
generation falls behind. Joins, leaves and each new worker's time to its first group are kept for the summary."""

from __future__ import annotations

import logging
import time

import ray

from rayrl.driver import cluster_nodes

log = logging.getLogger("rayrl")
LEAVE_MARGIN_S = 2.0  # a drained worker's loop must end this long before the deadline: removing it takes time
IDLE_BUSY_BAR = 0.8  # η > 0: a worker leaves as idle if the others would stay at most this busy without it


class ElasticScaler:
    def __init__(self, system, fleet) -> None:
        self.system, self.fleet, self.cfg = system, fleet, system.cfg.rollout
        self.table = fleet.table
        self.where = dict(zip(self._indices(), system.placement.nodes()["rollout"]))  # worker index -> node id
        self.next_index = len(self.where)
        self.last_look = 0.0
        self.joins: list[dict] = []
        self.leaves: list[dict] = []
        self.waiting_first: dict[int, dict] = {}  # joined workers with no group yet: their join record
        self.starting: dict[int, tuple] = {}  # index -> (node, start time, its health() ref); the table holds the worker
        self.hold = False  # a worker left as idle and generation is still ahead: no worker starts
        self.window = (time.monotonic(), self._busy())  # the idle window's start and each worker's busy seconds

    def check(self) -> None:
        """Leave drained nodes, admit workers that finished starting, start workers on nodes with room, note first
        groups; at most every rollout.fleet_check_s. Nothing here waits for a worker to start."""
        if time.monotonic() - self.last_look < self.cfg.fleet_check_s:
            return
        self.last_look = time.monotonic()
        draining = cluster_nodes.draining_nodes()
        self._forget_lost()
        self._leave_drained(draining)
        self._admit_started(draining)
        self._leave_idle()
        self._start(draining)
        self._first_groups()

    def _indices(self) -> list[int]:
        return [s.index for s in self.table.slots]

    def _busy(self) -> dict[int, float]:
        """Each worker's seconds with calls in its engine so far ({} if one does not answer)."""
        try:
            stats = ray.get([s.handle.stats.remote() for s in self.table.slots], timeout=10)
        except ray.exceptions.RayError:
            return {}
        return {i: s["busy_s"] for i, s in zip(self._indices(), stats)}

    def _leave_idle(self) -> None:
        """At the end of each rollout.idle_leave_s window, η > 0: workers idle because the staleness bound holds them
        back (generation ahead of training). The last joined worker leaves (why "idle") when the others, busy for
        the window's mean share, would stay at most IDLE_BUSY_BAR busy without it; none starts again until the
        fleet is busier than that."""
        (t0, before), now = self.window, time.monotonic()
        if not self.cfg.idle_leave_s or now - t0 < self.cfg.idle_leave_s:
            return
        busy, n = self._busy(), len(self.table.slots)
        self.window = (now, busy)
        if not set(busy) == set(before) == set(self._indices()):  # a worker came, went or did not answer
            return
        share = sum(max(0.0, busy[i] - before[i]) for i in busy) / ((now - t0) * n)
        self.hold = self.hold and share <= IDLE_BUSY_BAR
        joined = [s.index for s in self.table.slots if s.joined]
        if self.cfg.max_staleness > 0 and joined and n > 1 and share * n / (n - 1) <= IDLE_BUSY_BAR:
            index, start = max(joined), time.time()
            record = self.fleet.leave(index, start + self.cfg.idle_leave_s, why="idle")  # then its leftovers requeue
            record.update(node=self.where.pop(index), busy_share=share, left_s=time.time() - start)
            self.leaves.append(record)
            self.waiting_first.pop(index, None)
            self.hold, self.window = True, (time.monotonic(), self._busy())

    def _forget_lost(self) -> None:
        """Workers the fleet removed as lost (their node died): counted as leaves, with the prompts requeued."""
        for index in [i for i in self.where if i not in self._indices()]:
            node, record = self.where.pop(index), self.fleet.lost.pop(index, {})
            self.leaves.append({"worker": f"rollout-{index}", "node": node, "why": "lost",
                                "requeued": record.get("requeued"), "at": record.get("at", time.time())})
            self.waiting_first.pop(index, None)

    def _leave_drained(self, draining: dict[str, float]) -> None:
        for index in [s.index for s in self.table.slots if s.joined and self.where.get(s.index) in draining]:
            deadline = draining[self.where[index]] or time.time() + self.cfg.request_timeout_s
            t0 = time.time()
            record = self.fleet.leave(index, deadline - LEAVE_MARGIN_S)
            record.update(node=self.where.pop(index), deadline_s=deadline - t0, left_s=time.time() - t0,
                          within_deadline=time.time() <= deadline)
            self.leaves.append(record)
            self.waiting_first.pop(index, None)

    def _start(self, draining: dict[str, float]) -> None:
        """A worker on each node with room (up to rollout.max_workers, counting those still starting); none while
        generation stays ahead after a worker left as idle."""
        room = self.cfg.max_workers - len(self.table.slots) - len(self.starting)
        if room <= 0 or self.hold:
            return
        p = self.system.placement
        taken = set(self.where.values()) | {node for node, _, _ in self.starting.values()}
        nodes = cluster_nodes.nodes_with_room(self.system.cfg.placement.rollout_node_labels, p.share["rollout"],
                                              p.gpus["rollout"], taken | set(draining))
        for node in nodes[:room]:
            index = self.next_index
            self.next_index += 1
            worker = self.system.elastic_rollout_worker(index, node)
            self.table.start(index, worker)  # close() stops it until it joins
            self.starting[index] = (node, time.time(), worker.health.remote())

    def _admit_started(self, draining: dict[str, float]) -> None:
        """Workers whose engine answered join the fleet; one that failed, ran out of rollout.restart_timeout_s
        or whose node is being drained is stopped (its node may get another later)."""
        for index, (node, t0, ready) in list(self.starting.items()):
            done = bool(ray.wait([ready], timeout=0)[0])
            late = time.time() - t0 > self.cfg.restart_timeout_s
            if not (done or late or node in draining):
                continue
            del self.starting[index]
            failure = _start_failure(ready) if done else "it did not answer within rollout.restart_timeout_s"
            failure = "its node is being drained" if node in draining else failure
            if failure:
                ray.kill(self.table.turn_away(index))
                log.warning("rollout-%d on node %s was not admitted (%s)", index, node[:12], failure)
                continue
            self.fleet.join(index)
            self.where[index] = node
            record = {"worker": f"rollout-{index}", "node": node, "at": t0, "ready_s": time.time() - t0,
                      "first_group_s": None}
            self.joins.append(record)
            self.waiting_first[index] = record

    def _first_groups(self) -> None:
        """A joined worker's time from its creation (its node just found) to its first scored group."""
        for index, record in list(self.waiting_first.items()):
            try:
                groups = ray.get(self.table.slot(index).handle.stats.remote(), timeout=10)
            except (StopIteration, ray.exceptions.RayError):  # gone: the fleet's healing or a leave accounts for it
                continue
            if groups["groups"] > 0:
                record["first_group_s"] = time.time() - record["at"]
                del self.waiting_first[index]

    def summary(self) -> dict:
        return {"size": len(self.table.slots), "joins": self.joins, "leaves": self.leaves}

    def counts(self) -> dict:
        """How many workers joined and left so far, for each step's metrics."""
        return {"fleet_joins": len(self.joins), "fleet_leaves": len(self.leaves)}


def _start_failure(ready) -> str | None:
    """Why a started worker's health() call failed (its constructor raised, its node died), or None."""
    try:
        ray.get(ready)
        return None
    except ray.exceptions.RayError as err:
        return f"{type(err).__name__}: {str(err).strip().splitlines()[-1][:200]}"
