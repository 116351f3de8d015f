"""On the GPU machine (1 GPU is enough): each backend takes PPO steps in bf16 (policy and critic), and
the rollout-training mismatch on vLLM's sampled tokens meets the field's bar: mean |Δ log p| <= 0.01 and
token_mult_prob_error <= 1.02 over >= 500 tokens (the worst token is reported in the JSON, not asserted:
in bf16 vLLM's own decode is up to 0.08 from its fp32 rescoring). Runs tests/gpu/learner_check.py."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.gpu


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("backend", ["fsdp", "zero3"])
def test_mismatch_with_vllm_meets_the_bar(tmp_path, backend):
    commit = ["--commit", os.environ["COMMIT"]] if "COMMIT" in os.environ else []  # a copied checkout's git may lag
    subprocess.run([sys.executable, str(Path(__file__).with_name("learner_check.py")), "--backends", backend, "--out",
                    str(tmp_path), *commit], check=True, timeout=900)
    (row,) = json.loads((tmp_path / "gpu_learner_check.json").read_text())
    assert row["mean_token_prob"] > 0.3, "the sampled tokens are near-uniform; the comparison would prove little"
    assert all(math.isfinite(x) for x in row["losses"] + row["critic_losses"]), row
    assert row["mismatch_tokens"] >= 500, row
    assert row["mismatch_abs_mean"] <= 0.01, row
    assert row["token_mult_prob_error"] <= 1.02, row
