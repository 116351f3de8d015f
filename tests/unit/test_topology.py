"""The weight-sync group's ranks: learner rank 0 first, then each rollout worker's shards in order."""

import pytest

from rayrl.engines.transport.topology import topology


def test_ranks_follow_the_learner_in_worker_order():
    one = topology([1])
    assert one.world_size == 2 and one.first_ranks == [1]
    topo = topology([2, 1, 4])
    assert topo.world_size == 1 + 2 + 1 + 4
    assert topo.first_ranks == [1, 3, 4]


def test_a_worker_without_ranks_is_an_error():
    with pytest.raises(ValueError, match="at least one sync rank"):
        topology([1, 0])
