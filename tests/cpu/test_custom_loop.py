"""recipes/custom_loop.py, the public way to wire the actors by hand, on the test cluster: two steps move the
weights, and after the sync the rollout engine's log-probs equal the learner's (fp32, 1e-5)."""

from __future__ import annotations

import importlib.util
from pathlib import Path


def _load_recipe():
    path = Path(__file__).resolve().parents[2] / "recipes" / "custom_loop.py"
    spec = importlib.util.spec_from_file_location("custom_loop", path)
    recipe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(recipe)
    return recipe


def test_a_hand_written_loop_trains_and_syncs(ray_cluster, make_cfg):
    recipe = _load_recipe()
    out = recipe.main(make_cfg("learner.total_steps=2", "learner.lr=1e-3"))
    assert [s["version"] for s in out["steps"]] == [1, 2]
    assert out["weights_moved"] > 1e-4, "training did not change the weights"
    assert out["logprob_gap_after_sync"] <= 1e-5, out


def test_a_transport_added_in_one_module_carries_the_weights(ray_cluster, make_cfg):
    """sync.transport by import string (tests/cpu/toy_transport.py, no line of the library changed): the loop's
    syncs go through its files, and after them the engine's log-probs equal the learner's."""
    from tests.cpu.toy_transport import ROOT

    before = set(ROOT.glob("*/sync-*.pt")) if ROOT.exists() else set()
    recipe = _load_recipe()
    out = recipe.main(make_cfg("learner.total_steps=2", "learner.lr=1e-3",
                               "sync.transport=tests.cpu.toy_transport:FILES"))
    written = set(ROOT.glob("*/sync-*.pt")) - before
    assert len(written) >= 2, written  # one file per sync: the start's and one after each step
    assert [s["version"] for s in out["steps"]] == [1, 2]
    assert out["weights_moved"] > 1e-4
    assert out["logprob_gap_after_sync"] <= 1e-5, out
