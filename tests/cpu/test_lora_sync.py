"""LoRA through the real actors: a sync carries only the adapters, and after each the rollout engine (hf, and
vLLM's CPU engine with its own LoRA support) samples with them."""

from __future__ import annotations

import pytest
import ray

from rayrl.data import load_tasks
from rayrl.demo import prepare_models
from rayrl.driver import ActorSystem
from rayrl.models.lora import is_adapter


@pytest.mark.parametrize("engine", [["rollout.engine=hf"], ["rollout.engine=vllm", "vllm.enforce_eager=true",
                                                          "vllm.cpu_kv_cache_gb=0.25"]], ids=["hf", "vllm"])
def test_lora_sync_carries_only_the_adapters_and_the_engine_samples_with_them(ray_cluster, make_cfg, engine):
    """lora.enabled: after each sync the engine's log-probs of its own samples equal the learner's (fp32, 1e-5);
    with the sync skipped after a step they do not, so the check would catch an engine left on an old adapter.
    vLLM samples with the adapters as its own LoRA (enable_lora): loaded from a directory at the first sync,
    written into its LoRA slot at the later ones."""
    cfg = make_cfg("lora.enabled=true", "lora.rank=4", "learner.lr=1e-2", *engine)
    s = ActorSystem(cfg, f"lora-sync-{engine[0].split('=')[1]}", models=prepare_models(cfg))
    try:
        tasks = load_tasks(s.cfg.data)[0][:16]
        rollout, learner, reward = s.rollouts[0], s.learners.rank0, s.rewards[0]

        def worst_gap() -> tuple[float, list]:
            groups = ray.get(rollout.generate_groups.remote(tasks, 4, s.cfg.rollout.temperature))
            ours = ray.get(learner.completion_logprobs.remote(groups))
            gap = max(abs(a - b) for la, g in zip(ours, [x for g in groups for x in g.samples])
                      for a, b in zip(la, g.logprobs))
            return gap, groups

        plan = ray.get(learner.weight_plan.remote(1 << 30))  # what every sync sends: the adapters only
        paths = []
        for step in (1, 2, 3):
            gap, groups = worst_gap()
            assert gap <= 1e-5, f"version {step - 1}: max |rollout - learner| log-prob = {gap}"
            s.learners.train([[reward.score.remote(g)] for g in groups])
            synced = ray.get(s.broadcaster.sync.remote())
            assert synced.n_bytes == plan.n_bytes and all(is_adapter(sp.name) for b in plan.buckets for sp in b)
            paths.append(ray.get(rollout.sync_report.remote()).get("path"))
        if engine[0] == "rollout.engine=vllm":
            assert paths == ["lora_reload", "lora_in_place", "lora_in_place"], paths
        gap, groups = worst_gap()
        assert gap <= 1e-5
        s.learners.train([[reward.score.remote(g)] for g in groups])  # a step, no sync
        assert worst_gap()[0] > 1e-3, "the engine's stale adapters scored like the learner's new ones"
    finally:
        s.close()
