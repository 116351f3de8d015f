import pytest

from rayrl.staleness import StalenessManager


def test_synchronous_when_eta_is_zero():
    m = StalenessManager(batch_size=4, max_staleness=0)
    assert m.try_admit(10) == 4  # (0 + 0 + 1) * 4
    assert m.try_admit(1) == 0
    for _ in range(4):
        m.on_accept()
    assert m.capacity() == 0  # a finished batch does not open the next one; a new version does
    m.set_version(1)
    assert m.capacity() == 4


def test_eta_bounds_how_far_ahead_rollouts_run():
    m = StalenessManager(batch_size=4, max_staleness=2)
    assert m.try_admit(100) == 12  # (2 + 0 + 1) * 4
    m.on_accept()
    assert m.capacity() == 0  # accepted + running still 12
    m.set_version(1)
    assert m.capacity() == 4


def test_reject_frees_a_slot_and_misuse_raises():
    m = StalenessManager(batch_size=2, max_staleness=0)
    assert m.try_admit(2) == 2
    m.on_reject()
    assert m.capacity() == 1 and m.accepted == 0
    m.on_reject()
    with pytest.raises(RuntimeError):
        m.on_reject()
    m.set_version(3)
    with pytest.raises(ValueError, match="went back"):
        m.set_version(2)
    with pytest.raises(ValueError):
        StalenessManager(batch_size=0, max_staleness=0)


def test_rank_stats_merge_counts_and_weights():
    from rayrl.metrics import merge_rank_stats

    a = {"samples": 4, "tokens": 10, "reward_mean": 1.0, "accuracy": 1.0, "staleness_mean": 1.0,
         "staleness_max": 1.0, "loss": 0.5, "mismatch_tokens": 10, "mismatch_max": 3e-6, "mismatch_abs_mean": 1e-6, "token_mult_prob_error": 1.0, "mismatch_k3": 0.0}
    b = {"samples": 12, "tokens": 30, "reward_mean": 0.0, "accuracy": 0.0, "staleness_mean": 0.0,
         "staleness_max": 2.0, "loss": 0.5, "mismatch_tokens": 30, "mismatch_max": 1e-6, "mismatch_abs_mean": 2e-6, "token_mult_prob_error": 1.0, "mismatch_k3": 0.0}
    m = merge_rank_stats([a, b])
    assert m["mismatch_max"] == 3e-6 and m["mismatch_tokens"] == 40 and abs(m["mismatch_abs_mean"] - 1.75e-6) < 1e-12
    assert (m["samples"], m["tokens"], m["staleness_max"], m["loss"]) == (16, 40, 2.0, 0.5)
    assert m["reward_mean"] == 0.25 and m["accuracy"] == 0.25 and m["staleness_mean"] == 0.25
