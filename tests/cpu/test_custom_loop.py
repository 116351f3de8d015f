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


def test_a_loop_that_syncs_every_2_steps_at_staleness_1_trains_6_steps(ray_cluster, make_cfg):
    """Versions are learner steps: the syncs publish 2, 4, 6, and every batch comes from a published version at
    most one step behind the learner (rollout.max_staleness=1 = K - 1)."""
    recipe = _load_recipe()
    out = recipe.main(make_cfg("learner.total_steps=6", "rollout.max_staleness=1", "learner.lr=1e-3"), sync_every=2)
    steps = out["steps"]
    assert [s["version"] for s in steps] == [0, 2, 2, 4, 4, 6]
    assert [s["sample_versions"] for s in steps] == [[0], [0], [2], [2], [4], [4]], steps
    assert out["logprob_gap_after_sync"] <= 1e-5, out


def test_the_same_loop_at_staleness_0_raises_naming_the_fix(ray_cluster, make_cfg):
    """At η = 0 the second batch needs a sync first: get_batch raises NoProgress instead of waiting forever."""
    import threading

    from rayrl.progress import NoProgress

    recipe, raised = _load_recipe(), []

    def run() -> None:
        try:
            recipe.main(make_cfg("learner.total_steps=6", "rollout.max_staleness=0", "rollout.stall_s=8"),
                        sync_every=2)
        except Exception as err:  # noqa: BLE001 - the test looks at what came out
            raised.append(err)

    loop = threading.Thread(target=run, daemon=True)
    loop.start()
    loop.join(timeout=300)  # the actors' start, one step, then the watch's rollout.stall_s (8 s here)
    assert not loop.is_alive(), "the loop still waits for its second batch"
    (err,) = raised
    assert isinstance(err, NoProgress), repr(err)
    message = str(err.cause)
    assert "admission is closed at version 0" in message and "rollout.max_staleness >= K - 1" in message, message
    waited = float(message.split("unchanged for ")[1].split("s,")[0])
    assert 8 <= waited < 38, message
