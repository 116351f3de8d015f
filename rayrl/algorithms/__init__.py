"""Advantages, policy and value losses, KL estimators, aggregation: pure torch over Batch tensors."""

from rayrl.algorithms.advantages import advantages, group_advantages
from rayrl.algorithms.aggregation import denominator, token_weights
from rayrl.algorithms.kl import KL_ESTIMATORS, kl_k3
from rayrl.algorithms.policy_loss import policy_loss, token_mean
from rayrl.algorithms.value import gae, value_loss

__all__ = ["KL_ESTIMATORS", "advantages", "denominator", "gae", "group_advantages", "kl_k3", "policy_loss",
           "token_mean", "token_weights", "value_loss"]
