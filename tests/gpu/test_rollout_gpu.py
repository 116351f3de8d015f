"""On the GPU machine (2 GPUs): vLLM RolloutWorker and FSDP2 learner on separate GPUs; after an NCCL
weight update vLLM's log-probs match the learner's (fp32 compute) and greedy outputs change."""

import pytest
import ray
import torch

from rollout_check import GPU, check

pytestmark = pytest.mark.gpu


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
def test_nccl_weight_update_matches_learner(tmp_path):
    ray.init(address="local", include_dashboard=False)
    try:
        row = check("float32", str(tmp_path), GPU)
    finally:
        ray.shutdown()
    assert row["mean_token_prob"] > 0.2, "the policy is near-uniform; the comparison would prove little"
    assert row["max_diff_after"] <= 0.02, row
    assert int(row["greedy_changed"].split("/")[0]) > 0, row
