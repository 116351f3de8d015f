"""ElasticScaler (rollout.fleet=elastic): every rollout.fleet_check_s the driver asks it to look at the cluster.
A worker on a node being drained leaves (it finishes what it holds until the drain's deadline); a node with room
for a worker, matching placement.rollout_node_labels and holding none of the fleet, gets one while the fleet is
below rollout.max_workers. Joins, leaves and each new worker's time to its first group are kept for the summary."""

from __future__ import annotations

import logging
import time

import ray

from rayrl.driver import cluster_nodes

log = logging.getLogger("rayrl")
LEAVE_MARGIN_S = 2.0  # a drained worker's loop must end this long before the deadline: removing it takes time


class ElasticScaler:
    def __init__(self, system, fleet) -> None:
        self.system, self.fleet, self.cfg = system, fleet, system.cfg.rollout
        self.where = dict(zip(fleet.indices, system.placement.nodes()["rollout"]))  # worker index -> node id
        self.next_index = len(fleet.indices)
        self.last_look = 0.0
        self.joins: list[dict] = []
        self.leaves: list[dict] = []
        self.waiting_first: dict[int, dict] = {}  # joined workers with no group yet: their join record

    def check(self) -> None:
        """Leave drained nodes, join nodes with room, note first groups; at most every rollout.fleet_check_s."""
        if time.monotonic() - self.last_look < self.cfg.fleet_check_s:
            return
        self.last_look = time.monotonic()
        self._forget_lost()
        self._leave_drained()
        self._grow()
        self._first_groups()

    def _forget_lost(self) -> None:
        """Workers the fleet removed as lost (their node died): counted as leaves."""
        for index in [i for i in self.where if i not in self.fleet.indices]:
            node = self.where.pop(index)
            self.leaves.append({"worker": f"rollout-{index}", "node": node, "why": "lost", "at": time.time()})
            self.waiting_first.pop(index, None)

    def _leave_drained(self) -> None:
        draining = cluster_nodes.draining_nodes()
        for index in [i for i in self.fleet.elastic if self.where.get(i) in draining]:
            deadline = draining[self.where[index]] or time.time() + self.cfg.request_timeout_s
            t0 = time.time()
            record = self.fleet.leave(index, deadline - LEAVE_MARGIN_S)
            record.update(node=self.where.pop(index), deadline_s=deadline - t0, left_s=time.time() - t0,
                          within_deadline=time.time() <= deadline)
            self.leaves.append(record)
            self.waiting_first.pop(index, None)

    def _grow(self) -> None:
        room = self.cfg.max_workers - len(self.fleet.indices)
        if room <= 0:
            return
        p = self.system.placement
        nodes = cluster_nodes.nodes_with_room(self.system.cfg.placement.rollout_node_labels, p.share["rollout"],
                                              p.gpus["rollout"], skip=set(self.where.values()))
        for node in nodes[:room]:
            index, t0 = self.next_index, time.time()
            self.next_index += 1
            worker = self.system.elastic_rollout_worker(index, node)
            try:
                ray.get(worker.health.remote(), timeout=self.cfg.restart_timeout_s)
            except (ray.exceptions.RayError, TimeoutError) as err:
                ray.kill(worker)
                log.warning("rollout-%d could not start on node %s (%s); trying again later", index, node[:12], err)
                continue
            self.fleet.join(index, worker)
            self.where[index] = node
            record = {"worker": f"rollout-{index}", "node": node, "at": t0, "ready_s": time.time() - t0,
                      "first_group_s": None}
            self.joins.append(record)
            self.waiting_first[index] = record

    def _first_groups(self) -> None:
        """A joined worker's time from its creation (its node just found) to its first scored group."""
        for index, record in list(self.waiting_first.items()):
            try:
                groups = ray.get(self.fleet.workers[self.fleet.indices.index(index)].stats.remote(), timeout=10)
            except (ValueError, ray.exceptions.RayError):  # gone: the fleet's healing or a leave accounts for it
                continue
            if groups["groups"] > 0:
                record["first_group_s"] = time.time() - record["at"]
                del self.waiting_first[index]

    def summary(self) -> dict:
        return {"size": len(self.fleet.indices), "joins": self.joins, "leaves": self.leaves}
