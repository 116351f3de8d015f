"""Resource layouts: which bundle each actor lives in."""

from rayrl.placement.address import free_port, node_address
from rayrl.placement.plan import PlacementPlan

__all__ = ["PlacementPlan", "free_port", "node_address"]
