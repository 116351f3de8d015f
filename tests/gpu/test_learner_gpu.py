"""On the GPU machine (2 GPUs): each backend trains in bf16; vLLM's log-probs on the HF export match the
learner's on a peaked policy. Runs benchmarks/gpu_learner_check.py and checks its JSON."""

import json
import subprocess
import sys

import pytest
import torch

pytestmark = pytest.mark.gpu

ZERO3_BF16 = pytest.mark.xfail(strict=True, reason=(
    "measured 2026-11-30 on 2 H200s, vLLM 0.26.0: ZeRO-3's worst token is 0.067 from vLLM in bf16, while "
    "vLLM's own bf16 decode is 0.079 from its exact fp32 rescoring of the same tokens and the learner only "
    "0.021; a worst-token bar of 0.02 in bf16 is below vLLM's own rounding (the mismatch issue restates it)"))


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
@pytest.mark.parametrize("backend", ["fsdp", pytest.param("zero3", marks=ZERO3_BF16)])
def test_export_logprobs_match_vllm(tmp_path, backend):
    subprocess.run([sys.executable, "-m", "benchmarks.gpu_learner_check", "--backends", backend, "--out",
                    str(tmp_path)], check=True, timeout=900)
    (row,) = json.loads((tmp_path / "gpu_learner_check.json").read_text())
    assert row["mean_token_prob"] > 0.5, "the policy is not peaked; the comparison would prove little"
    assert row["max_logprob_diff"] <= 0.02, row
