"""Weight transports: learner rank 0 sends, rollout engines receive, in packed buckets."""

from rayrl.engines.transport.base import BucketPlan, GroupInfo, WeightTransport, plan_buckets

__all__ = ["BucketPlan", "GroupInfo", "WeightTransport", "plan_buckets"]
