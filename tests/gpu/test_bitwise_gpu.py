"""On one GPU: rollout.bitwise_on_policy makes the learner's bf16 log-probs equal vLLM's, bit for bit.

The engine check crosses vLLM 0.26's 256-token block-size switch (a first step prefilling >= 300 tokens,
decode with >= 256 running sequences) and scores >= 2,000 sampled tokens with the learner's forward; the
recipe run checks every training step's mismatch after weight syncs, through the FSDP2 learner."""

import pytest

from benchmarks.bitwise import engine_check, fixtures, recipe

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def model_and_data(tmp_path_factory):
    return fixtures(tmp_path_factory.mktemp("bitwise"))


def test_vllm_is_batch_invariant_and_the_learner_scores_its_tokens_exactly(model_and_data):
    row = engine_check(model_and_data[0])
    print(row)
    assert row["prefill_tokens_first_step"] >= 300 and row["decode_running"] >= 256
    assert row["alone_vs_batched_same_tokens"] and row["alone_vs_batched_max"] == 0.0, row
    assert row["sampled_tokens"] >= 2000
    assert row["learner_bitwise_max"] == 0.0, row
    assert row["learner_normal_max"] > 0.0, "the normal forward matched too: the check could not fail"
    assert row["grad_cosine"] >= 0.99 and 0.9 <= row["grad_norm_ratio"] <= 1.1, row


def test_every_training_step_is_exactly_on_policy(model_and_data, tmp_path):
    run = recipe(*model_and_data, tmp_path, bitwise=True, steps=4, tag="bitwise")
    print(run)
    assert run["steps"] == 4
    assert run["mismatch_max"] == [0.0] * 4, run  # steps 2-4 follow 1-3 weight syncs
    assert min(run["mismatch_tokens"]) >= 2000, run
