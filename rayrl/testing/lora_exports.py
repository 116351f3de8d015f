"""A LoRA learner's exports sampled by vLLM and rescored by the learner: the merged export as a plain model, or
the PEFT adapter directory through vLLM's LoRA support on the base. Used by tests/cpu/test_lora_exports.py
(vLLM's CPU engine, fp32) and tests/gpu/test_lora_gpu.py (the GPU engine)."""

from __future__ import annotations

import gc
import os

from rayrl import components
from rayrl.batching import collate
from rayrl.demo import prepare_models
from rayrl.types import Sample, Task, TrajectoryGroup

LORA = ["lora.enabled=true", "lora.rank=8", "learner.lr=1e-2"]


def trained_export(make_cfg, random_groups, out) -> tuple[str, object]:
    """The demo base model's path and a learner after three LoRA steps, saved to out (merged export + adapter/)."""
    base = str(prepare_models(make_cfg("demo.warmup_steps=20")).policy)
    learner = components.learner(make_cfg(*LORA), base)
    for seed in (0, 1, 2):
        learner.train_step(collate(random_groups(4, 4, seed), learner.tokenizer.pad_token_id))
    learner.save(str(out))
    return base, learner


def vllm_gap(model: str, learner, lora_request=None, **engine) -> dict:
    """vLLM samples 48 tokens for 16 prompts at the learner's temperature (fp32, its log-probs at that
    temperature, as the rollout engine asks); the learner rescores them: |Δ log p| over every sampled token."""
    from vllm import LLM, SamplingParams

    saved = dict(os.environ)
    os.environ["VLLM_WORKER_MULTIPROC_METHOD"] = "spawn"  # the caller may have initialised CUDA or threads
    llm = LLM(model=model, dtype="float32", enforce_eager=True, max_model_len=256, skip_tokenizer_init=True, seed=0,
              logprobs_mode="processed_logprobs", **engine)
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
    with learner.backend.model.disable_adapter():  # the base alone: what an adapter that never arrived samples
        base_gap = (learner.compute_logprobs(batch) - batch.behav_logprobs)[mask].abs()
    return {"tokens": int(mask.sum()), "max": gap.max().item(), "mean": gap.mean().item(),
            "base_alone_max": base_gap.max().item()}
