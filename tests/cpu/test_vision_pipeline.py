"""Vision-language RL through the real actors: a task's images stored once per task (never per sample), the
rollout's log-probs equal to the learner's with images in context, tasks whose image does not decode rejected and
counted, and the run training to its end."""

from __future__ import annotations

import pytest
import ray

from rayrl.data import load_tasks
from rayrl.demo import prepare_models
from rayrl.driver import ActorSystem
from rayrl.trainer import train

VLLM = ["rollout.engine=vllm", "vllm.enforce_eager=true", "vllm.cpu_kv_cache_gb=0.25", "vllm.dtype=float32",
        "vllm.max_images_per_prompt=1"]


@pytest.mark.parametrize("engine", ["hf", "vllm"])
def test_visual_recipe_stores_each_task_images_once_and_samples_on_policy(ray_cluster, make_cfg, engine):
    """On the hf engine and on vLLM's CPU engine (its own processor expands the images)."""
    cfg = make_cfg("data.task=visual_arithmetic", "data.max_operand=9", "data.eval_size=20",
                   "demo.warmup_steps=100", "learner.total_steps=4", "rollout.max_staleness=1",
                   "checkpoint.every_steps=2", f"metrics.run_name=vision-pipeline-{engine}",
                   "rollout.workflow=tests.cpu.faulty_images:EveryFifthBroken", *(VLLM if engine == "vllm" else []))
    summary = train(cfg)
    assert summary["groups"]["trained"] == 4 * cfg.rollout.batch_size
    # a broken image seen only during the run: its task rejected and counted, never trained, the run goes on
    assert summary["bad_image_tasks"] > 0 and summary["groups"]["rejected"] == summary["bad_image_tasks"]
    # one object per fed task: far fewer than the samples that used the images
    assert summary["image_puts"] == summary["prompts_fed"] >= summary["groups"]["produced"]
    assert summary["samples"] == summary["groups"]["trained"] * cfg.rollout.group_size > summary["image_puts"]
    assert summary["mismatch"]["mismatch_tokens"] > 0 and summary["mismatch"]["mismatch_max"] <= 1e-5


def test_vllm_image_embeddings_follow_the_weights(ray_cluster, make_cfg):
    """vLLM keeps an image's encoder output for later requests with the same image. With the vision tower trained,
    a weight update drops them: the same pictures sampled after an update score like the learner's new weights
    (vLLM's embeddings of the old weights measured 0.44 off)."""
    cfg = make_cfg("data.task=visual_arithmetic", "data.max_operand=9", "data.eval_size=20", "demo.warmup_steps=100",
                   "learner.train_vision=true", *VLLM)
    system = ActorSystem(cfg, "vision-encoder-cache", models=prepare_models(cfg))
    try:
        rollout, learner, T = system.rollouts[0], system.learners.rank0, cfg.rollout.temperature
        tasks = load_tasks(cfg.data)[0][:8]
        before = ray.get(rollout.generate_groups.remote(tasks, 4, T))
        refs = [system.rewards[0].score.remote(g) for g in before]
        system.learners.train([[r] for r in refs])
        ray.get(system.broadcaster.sync.remote())  # nothing running: vLLM idle at the update
        after = ray.get(rollout.generate_groups.remote(tasks, 4, T))
        assert _worst(ray.get(learner.completion_logprobs.remote(after)), after) <= 1e-5
        # not vacuous: under the new weights the first samples score differently
        assert _worst(ray.get(learner.completion_logprobs.remote(before)), before) > 1e-3
    finally:
        system.close()


def _worst(learned: list[list[float]], groups) -> float:
    return max(abs(a - b) for lp, s in zip(learned, [s for g in groups for s in g.samples]) for a, b in zip(lp, s.logprobs))
