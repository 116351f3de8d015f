"""Runs that can never get a batch stop with one message naming the component and the key, within a bounded
number of batches' worth of groups (rollout.max_idle_batches): a judge that leaves half of every group
unscored, and a judge that rejects every answer while dynamic sampling drops groups of equal rewards."""

from __future__ import annotations

import pytest

from rayrl.progress import NoProgress
from rayrl.trainer import train
from tests.cpu.test_reward_model_actors import JUDGE

IDLE = ["rollout.max_idle_batches=3", "rollout.min_idle_groups=1", "learner.total_steps=3"]  # 3 x 8 groups


def _stop_message(cfg) -> str:
    with pytest.raises(NoProgress) as stopped:
        train(cfg)
    message = str(stopped.value)
    counted = int(message.split("among the last ")[1].split(" ")[0])
    assert 24 <= counted <= 48, message  # checked at every group the buffer hears of: a few more may come at once
    return message


def test_a_judge_that_leaves_half_of_every_group_unscored_stops_the_run(ray_cluster, make_cfg):
    parser = "tests.cpu.faulty_verdicts:every_other_unparsable"
    message = _stop_message(make_cfg(*JUDGE, *IDLE, f"reward.model.parser={parser}", "metrics.run_name=half-scored"))
    assert message.startswith("no trainable group among the last "), message
    assert f"the judge (reward.model.kind=judge, reward.model.parser={parser}) left unscored" in message, message
    assert "2 samples without a reward model score; first: unparsable: verdict" in message, message
    assert "reward function" not in message and "unparsable: unparsable" not in message, message
    assert "the run stopped at step 1" in message


def test_a_judge_that_rejects_everything_under_dynamic_sampling_stops_the_run(ray_cluster, make_cfg):
    parser = "tests.cpu.faulty_verdicts:always_no"
    message = _stop_message(make_cfg(*JUDGE, *IDLE, f"reward.model.parser={parser}", "algorithm.dynamic_sampling=true",
                                     "metrics.run_name=all-rejected"))
    assert message.startswith("no trainable group among the last "), message
    assert "every sample of the group had the same reward (all 0)" in message, message
    assert f"the judge (reward.model.kind=judge, reward.model.parser={parser}) gives" in message, message
    assert "algorithm.dynamic_sampling=false" in message
