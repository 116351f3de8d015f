"""The mismatch gauges against values worked by hand."""

import math

import pytest
import torch

from rayrl.algorithms.mismatch import MismatchMeter, merge_mismatch


def test_mismatch_meter_over_micro_batches_counts_only_fresh_tokens():
    m = MismatchMeter()
    learner = torch.tensor([[-1.0, -2.0, -0.5]])
    engine = torch.tensor([[-1.1, -2.0, -3.0]])
    m.add(learner, engine, torch.tensor([[True, True, False]]))  # the third token is stale: not counted
    m.add(torch.tensor([[-0.3]]), torch.tensor([[-0.1]]), torch.tensor([[True]]))
    r = m.result()
    deltas = [0.1, 0.0, -0.2]  # learner - engine
    assert r["mismatch_tokens"] == 3
    assert r["mismatch_abs_mean"] == pytest.approx(0.1, abs=1e-6)
    assert r["token_mult_prob_error"] == pytest.approx(sum(math.exp(abs(d)) for d in deltas) / 3, abs=1e-6)
    assert r["mismatch_k3"] == pytest.approx(sum(math.exp(-d) + d - 1 for d in deltas) / 3, abs=1e-6)
    assert r["mismatch_max"] == pytest.approx(0.2, abs=1e-6)
    empty = MismatchMeter().result()
    assert empty["mismatch_tokens"] == 0 and empty["token_mult_prob_error"] == 1.0


def test_mismatch_merges_token_weighted_across_ranks():
    a = {"mismatch_tokens": 1, "mismatch_abs_mean": 0.4, "token_mult_prob_error": 1.4, "mismatch_k3": 0.1,
         "mismatch_max": 0.4}
    b = {"mismatch_tokens": 3, "mismatch_abs_mean": 0.0, "token_mult_prob_error": 1.0, "mismatch_k3": 0.0,
         "mismatch_max": 0.0}
    m = merge_mismatch([a, b])
    assert m["mismatch_tokens"] == 4 and m["mismatch_max"] == 0.4
    assert m["mismatch_abs_mean"] == pytest.approx(0.1) and m["token_mult_prob_error"] == pytest.approx(1.1)


def test_run_summary_weights_steps_by_tokens():
    from rayrl.algorithms.mismatch import summarize_mismatch

    steps = [{"mismatch_tokens": 100, "mismatch_abs_mean": 0.01, "token_mult_prob_error": 1.01, "mismatch_k3": 1e-4,
              "mismatch_max": 0.2, "correction_frac": 0.0},
             {"mismatch_tokens": 300, "mismatch_abs_mean": 0.03, "token_mult_prob_error": 1.03, "mismatch_k3": 3e-4,
              "mismatch_max": 0.1, "correction_frac": 0.1},
             {"mismatch_tokens": 0, "mismatch_abs_mean": 0.0, "token_mult_prob_error": 1.0, "mismatch_k3": 0.0,
              "mismatch_max": 0.0}]  # a step with no fresh tokens counts for nothing
    out = summarize_mismatch(steps)
    assert out["mismatch_tokens"] == 400 and out["mismatch_max"] == 0.2
    assert out["mismatch_abs_mean"] == pytest.approx(0.025) and out["token_mult_prob_error"] == pytest.approx(1.025)
    assert out["mismatch_abs_mean_last"] == 0.03 and out["correction_frac_mean"] == pytest.approx(0.05)
    assert summarize_mismatch([])["mismatch_tokens"] == 0
