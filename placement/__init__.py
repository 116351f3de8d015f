"""Resource layouts: which bundle each actor lives in."""

from rayrl.placement.plan import PlacementPlan

__all__ = ["PlacementPlan"]
