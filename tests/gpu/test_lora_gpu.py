"""On one GPU: a LoRA learner's exports load into vLLM and sample with the learner's policy. The merged export as
a plain model, and the PEFT adapter directory through vLLM's LoRA support on the base model: the learner
(fp32, CPU) rescores vLLM's fp32 samples of each and the log-probs agree."""

import gc
import os

import pytest
import torch

from benchmarks.common import write_result
from rayrl import components
from rayrl.batching import collate
from rayrl.components import demo_model
from rayrl.models.lora import ADAPTER_DIR
from rayrl.types import Sample, Task, TrajectoryGroup

pytestmark = pytest.mark.gpu

LORA = ["lora.enabled=true", "lora.rank=8", "learner.lr=1e-2"]
BOUND = 1e-3  # fp32 on both sides, different kernels (vLLM on the GPU, the learner on the CPU)


@pytest.fixture(scope="module")
def exported(make_cfg, random_groups, tmp_path_factory):
    """The base model, a learner after three LoRA steps, and its checkpoint directory."""
    base = str(demo_model(make_cfg("demo.warmup_steps=20")))
    learner = components.learner(make_cfg(*LORA), base)
    for seed in (0, 1, 2):
        learner.train_step(collate(random_groups(4, 4, seed), learner.tokenizer.pad_token_id))
    out = tmp_path_factory.mktemp("lora-export")
    learner.save(str(out))
    return base, learner, out


def _vllm_gap(model: str, learner, **engine) -> dict:
    """vLLM samples 48 tokens for 16 prompts at the learner's temperature (fp32); the learner rescores them."""
    from vllm import LLM, SamplingParams

    saved = dict(os.environ)
    os.environ["VLLM_WORKER_MULTIPROC_METHOD"] = "spawn"
    lora_request = engine.pop("lora_request", None)
    llm = LLM(model=model, dtype="float32", enforce_eager=True, gpu_memory_utilization=0.15, max_model_len=256,
              skip_tokenizer_init=True, seed=0,
              logprobs_mode="processed_logprobs", **engine)  # at the sampling temperature, as the rollout engine
    try:
        prompts = [[1] + [4 + (i * 7 + j) % 12 for j in range(6)] for i in range(16)]
        params = SamplingParams(temperature=learner.setup.temperature, max_tokens=48, logprobs=0, ignore_eos=True,
                                detokenize=False, seed=3)
        outputs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, lora_request=lora_request)
    finally:
        del llm
        gc.collect()
        os.environ.clear()
        os.environ.update(saved)
    samples = []
    for i, out in enumerate(outputs):
        c = out.outputs[0]
        logprobs = [lp[t].logprob for t, lp in zip(c.token_ids, c.logprobs)]
        samples.append(Sample(str(i), prompts[i], list(c.token_ids), logprobs, [0] * len(logprobs), "length"))
    batch = collate([TrajectoryGroup(Task("0", "", "0"), samples)], learner.tokenizer.pad_token_id)
    mask = batch.loss_mask > 0
    gap = (learner.compute_logprobs(batch) - batch.behav_logprobs)[mask].abs()
    return {"tokens": int(mask.sum()), "max": gap.max().item(), "mean": gap.mean().item()}


def test_vllm_samples_the_merged_export_with_the_learners_policy(exported):
    _, learner, out = exported
    gap = _vllm_gap(str(out), learner)
    print("merged export in vLLM:", gap, "->", write_result("lora_export_check", {"merged_in_vllm": gap}))
    assert gap["tokens"] == 16 * 48 and gap["max"] <= BOUND, gap


def test_vllm_samples_the_adapter_directory_on_the_base_with_the_learners_policy(exported):
    from vllm.lora.request import LoRARequest

    base, learner, out = exported
    adapted = _vllm_gap(base, learner, enable_lora=True, max_lora_rank=8,
                        lora_request=LoRARequest("trained", 1, str(out / ADAPTER_DIR)))
    plain = _vllm_gap(base, learner)  # the base alone: what an adapter that never arrived would sample
    print("adapter directory in vLLM:", adapted, "base alone:", plain, "->",
          write_result("lora_export_check", {"adapter_in_vllm": adapted, "base_alone": plain}))
    assert adapted["max"] <= BOUND, adapted
    assert plain["max"] > BOUND, "the adapters change nothing: the check could not fail"
