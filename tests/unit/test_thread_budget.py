"""The CPU learner's thread budget: the cores a run reserved on the node, less those the rollout workers kept
busy while the learner last trained."""

from rayrl.driver.threads import ThreadBudget


def budget(cores: int, ranks: int = 1) -> ThreadBudget:
    b = object.__new__(ThreadBudget)  # the rule alone: no cluster, no workers to ask
    b.cores, b.ranks = cores, ranks
    return b


def test_a_worker_generating_beside_the_learner_keeps_its_core():
    two = budget(2)
    assert two._share(0.0) == 2  # η = 0: nothing generates while the learner trains
    assert two._share(0.2) == 2  # a worker busy a fifth of the time leaves its core
    assert two._share(0.44) == 1  # busy 44 %: on two threads the learner stepped 0.19 s, on one 0.15 s
    assert two._share(1.7) == 1  # never below one thread
    assert budget(8, ranks=2)._share(2.2) == 3  # 2.2 busy cores keep 2: (8 - 2) // 2 per rank
    assert budget(8, ranks=2)._share(2.3) == 2  # 2.3 keep 3
