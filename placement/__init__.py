"""Resource layouts: which bundle each actor lives in."""

from rayrl.placement.address import node_address
from rayrl.placement.plan import PlacementPlan

__all__ = ["PlacementPlan", "node_address"]
