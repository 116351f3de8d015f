"""On one GPU: a LoRA learner's merged export loads into vLLM as a plain model and samples with the learner's
policy (vLLM fp32 on the GPU, the learner fp32 on the CPU). The adapter directory through vLLM's LoRA is checked
on vLLM's CPU engine (tests/cpu/test_lora_exports.py): vLLM 0.26's GPU LoRA kernels take no float32."""

import pytest

from rayrl.testing.lora_exports import trained_export, vllm_gap
from rayrl.testing.records import write_result

pytestmark = pytest.mark.gpu

BOUND = 1e-3  # fp32 on both sides, different kernels; measured 1.1e-4 on one H200


def test_vllm_samples_the_merged_export_with_the_learners_policy(make_cfg, random_groups, tmp_path):
    _, learner = trained_export(make_cfg, random_groups, tmp_path)
    gap = vllm_gap(str(tmp_path), learner, gpu_memory_utilization=0.15)
    print("merged export in vLLM:", gap, "->", write_result("lora_export_check", {"merged_in_vllm": gap}))
    assert gap["tokens"] == 16 * 48 and gap["max"] <= BOUND, gap
    assert gap["base_alone_max"] > BOUND, "the adapters change nothing: the check could not fail"
