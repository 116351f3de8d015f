"""A user's short run must not make the model worse: the default recipe after 40 steps, and its 8 x 4
variant after 60, on one seed (the benchmark's three: `python -m benchmarks.learning.early_dip`,
early_dip-20261201-121644.json: +0.135 / +0.140 / +0.105 and 0.245 / 0.250 / 0.250 from 0.195)."""

from __future__ import annotations

import pytest

from rayrl.testing.short_runs import BASE, SETUPS, held_out_rise
from rayrl.trainer import train

# held-out greedy accuracy above the start. 32 x 8: about half the smallest rise of the benchmark's three seeds
# (early_dip-20261201-121644.json: after 40 steps +0.105 to +0.140). 8 x 4: two held-out tasks (0.01); its rise
# varies with the run's timing at η = 1 even on one seed: +0.020 in a CI run, +0.040 and +0.045 for seed 0 and
# +0.090, +0.050 for seeds 1, 2 in one local run (early_dip-20261203-023257.json)
RISE = {"32x8": 0.05, "8x4": 0.01}


@pytest.mark.parametrize("setup", ["32x8", "8x4"])
def test_short_run_does_not_get_worse(ray_cluster, make_cfg, setup):
    cfg = make_cfg(*BASE, *SETUPS[setup], "rollout.seed=0", "learner.seed=0", f"metrics.run_name=dip-{setup}")
    s = train(cfg)
    before, after = s["eval_accuracy_before"], s["eval_accuracy_after"]
    assert held_out_rise(s) >= RISE[setup], (f"{setup}: held-out accuracy {before:.3f} -> {after:.3f} after "
                                             f"{s['steps']} steps, want a rise >= {RISE[setup]}")
    assert s["groups"]["equal_rewards"] > 0  # dynamic sampling (on in the recipe, set in BASE) dropped groups


# LoRA (rank 16, learner.lr=1e-3), 32 x 8 after 40 steps, held-out accuracy above the start by about half the
# smallest rise of three seeds: hf engine early_dip-20261202-150017.json +0.185 / +0.115 / +0.085, vLLM's CPU
# engine early_dip-20261202-150352.json +0.130 / +0.090 / +0.080
LORA = ["lora.enabled=true", "learner.lr=1e-3"]
# The hf run at η = 0: at η = 1 its rise on seed 0 moved with the run's timing, +0.040 in a CI run (failing the
# bar by rounding), +0.120 and +0.105 alone; at η = 0 it was +0.155 twice, the same to the last task
LORA_ENGINES = {"hf": ["rollout.engine=hf", "rollout.max_staleness=0"],
                "vllm": ["rollout.engine=vllm", "vllm.enforce_eager=true", "vllm.cpu_kv_cache_gb=0.25"]}


@pytest.mark.parametrize("engine", list(LORA_ENGINES))
def test_lora_short_run_learns(ray_cluster, make_cfg, engine):
    cfg = make_cfg(*BASE, *SETUPS["32x8"], *LORA, *LORA_ENGINES[engine], "rollout.seed=0", "learner.seed=0",
                   f"metrics.run_name=lora-{engine}")
    s = train(cfg)
    before, after = s["eval_accuracy_before"], s["eval_accuracy_after"]
    assert held_out_rise(s) >= 0.04, f"LoRA on {engine}: held-out accuracy {before:.3f} -> {after:.3f}"
    assert s["weight_sync"]["share_of_model"] < 0.2  # adapters only (16.1 % of this small model at rank 16)
