"""Weight transports: learner rank 0 sends, rollout engines receive, in packed buckets; one TransportPlan each."""

from rayrl.engines.transport.base import (BucketPlan, GroupInfo, TransportPlan, WeightReceiver, WeightSender,
                                          plan_buckets)

__all__ = ["BucketPlan", "GroupInfo", "TransportPlan", "WeightReceiver", "WeightSender", "plan_buckets"]
