"""A LoRA learner's exports in vLLM (its CPU engine, fp32): the merged export as a plain model, and the PEFT adapter
directory through vLLM's LoRA support on the base model, each sample with the learner's policy."""

import pytest

from rayrl.testing.lora_exports import trained_export, vllm_gap
from rayrl.models.lora import ADAPTER_DIR

CPU_ENGINE = {"gpu_memory_utilization": 0.3, "kv_cache_memory_bytes": 2**28}  # vLLM's CPU engine: a small KV cache


@pytest.fixture(scope="module")
def exported(make_cfg, random_groups, tmp_path_factory):
    out = tmp_path_factory.mktemp("lora-export")
    base, learner = trained_export(make_cfg, random_groups, out)
    return base, learner, out


def test_vllm_samples_the_merged_export_with_the_learners_policy(exported):
    _, learner, out = exported
    gap = vllm_gap(str(out), learner, **CPU_ENGINE)
    assert gap["tokens"] == 16 * 48 and gap["max"] <= 1e-5, gap
    assert gap["base_alone_max"] > 1e-3, "the adapters change nothing: the check could not fail"


def test_vllm_samples_the_adapter_directory_on_the_base_with_the_learners_policy(exported):
    from vllm.lora.request import LoRARequest

    base, learner, out = exported
    gap = vllm_gap(base, learner, LoRARequest("trained", 1, str(out / ADAPTER_DIR)), enable_lora=True,
                   max_lora_rank=8, **CPU_ENGINE)
    assert gap["tokens"] == 16 * 48 and gap["max"] <= 1e-5, gap
    assert gap["base_alone_max"] > 1e-3, gap
