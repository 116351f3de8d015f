"""On the GPU machine (2 GPUs): both backends train in bf16; vLLM's log-probs on the HF export match
the learner's on a peaked policy. Runs benchmarks/gpu_learner_check.py and checks its JSON."""

import json
import subprocess
import sys

import pytest
import torch

pytestmark = pytest.mark.gpu


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
def test_export_logprobs_match_vllm(tmp_path):
    subprocess.run([sys.executable, "-m", "benchmarks.gpu_learner_check", "--out", str(tmp_path)], check=True,
                   timeout=900)
    rows = json.loads((tmp_path / "gpu_learner_check.json").read_text())
    assert {r["backend"] for r in rows} == {"fsdp", "deepspeed"}
    for r in rows:
        assert r["mean_token_prob"] > 0.5, "the policy is not peaked; the comparison would prove little"
        assert r["max_logprob_diff"] <= 0.02, r
