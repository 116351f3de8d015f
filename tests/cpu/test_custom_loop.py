"""recipes/custom_loop.py, the public way to wire the actors by hand, on the test cluster: two steps move the
weights, and after the sync the rollout engine's log-probs equal the learner's (fp32, 1e-5)."""

from __future__ import annotations

import importlib.util
from pathlib import Path


def test_a_hand_written_loop_trains_and_syncs(ray_cluster, make_cfg):
    path = Path(__file__).resolve().parents[2] / "recipes" / "custom_loop.py"
    spec = importlib.util.spec_from_file_location("custom_loop", path)
    recipe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(recipe)
    out = recipe.main(make_cfg("learner.total_steps=2", "learner.lr=1e-3"))
    assert [s["version"] for s in out["steps"]] == [1, 2]
    assert out["weights_moved"] > 1e-4, "training did not change the weights"
    assert out["logprob_gap_after_sync"] <= 1e-5, out
