"""Resource layouts: which bundle each actor lives in."""

from rayrl.placement.address import LOOPBACK, free_port, init_method, node_address, rendezvous_file
from rayrl.placement.plan import PlacementPlan

__all__ = ["LOOPBACK", "PlacementPlan", "free_port", "init_method", "node_address", "rendezvous_file"]
