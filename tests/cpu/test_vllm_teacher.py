"""The vLLM teacher on vLLM's real CPU engine: a completion's log-probs taken as prompt log-probs of prompt +
completion, its logits scaled to the student's temperature in vLLM's workers, equal the hf teacher's (fp32)."""

from __future__ import annotations

import asyncio

from rayrl import components
from rayrl.config import VLLMConfig
from rayrl.demo import prepare_models
from rayrl.engines.teacher.hf import HFTeacher
from rayrl.rewards import teacher_scores

import vllm  # noqa: E402,F401 - make test installs the CPU build: missing, this fails rather than skips


def test_the_vllm_teacher_scores_every_completion_token_as_the_hf_teacher(make_cfg, random_groups):
    cfg = make_cfg("demo.warmup_steps=20", "rollout.temperature=0.7")
    path = str(prepare_models(cfg).policy)
    requests = teacher_scores.requests_for(random_groups(3, 4, seed=4))
    want = asyncio.run(HFTeacher(path, 0.7, on_gpu=False).score(requests))
    section = cfg.teacher.model_copy(update={"engine": "vllm", "path": path})
    teacher = components.teacher(section, 0.7, False, 1, VLLMConfig(enforce_eager=True, cpu_kv_cache_gb=0.25,
                                                                    dtype="float32"))
    try:
        got = asyncio.run(teacher.score(requests))
    finally:
        teacher.shutdown()
    assert [len(x) for x in got] == [len(r.completion_ids) for r in requests]
    gap = max(abs(a - b) for x, y in zip(got, want) for a, b in zip(x, y))
    assert gap <= 1e-5, gap
    # vLLM's prompt log-probs come from unscaled logits: far from the temperature-1.0 scores, the scale reached them
    unscaled = asyncio.run(HFTeacher(path, 1.0, on_gpu=False).score(requests))
    assert max(abs(a - b) for x, y in zip(got, unscaled) for a, b in zip(x, y)) > 1e-3
