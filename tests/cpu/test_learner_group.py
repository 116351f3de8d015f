"""Sharded learner groups on gloo: 2 ranks give the same loss and weights as 1 plain rank."""

from __future__ import annotations

import pytest
import ray

from rayrl.actors import LearnerGroup
from rayrl.demo import prepare_models
from rayrl.placement import PlacementPlan


def train_twice(cfg, model_path, items, name):
    plan = PlacementPlan(cfg, name=name)
    plan.create()
    group = LearnerGroup(cfg, model_path, plan)
    try:
        stats = [group.train(items).stats for _ in range(2)]
        return stats, group.full_weights()
    finally:
        group.kill()
        plan.remove()


COMMON = ("learner.lr=1e-4", "learner.max_tokens_per_micro_batch=64")


@pytest.fixture(scope="module")
def reference(ray_cluster, make_cfg, random_groups):
    """The model, the batch, and one plain rank's two steps per set of extra overrides (each run once)."""
    model_path = prepare_models(make_cfg(*COMMON)).policy
    groups = random_groups(8, 4, seed=1)
    items = [[ray.put(g)] for g in groups]
    runs = {}

    def one_rank(extra: tuple[str, ...]):
        if extra not in runs:
            runs[extra] = train_twice(make_cfg(*COMMON, *extra), model_path, items, f"ref{len(runs)}")
        return runs[extra]
    return model_path, items, one_rank


# minibatches: each rank splits its own groups (dealt round-robin) in two, so with 8 groups over 2 ranks each
# minibatch holds the same groups as on one rank
@pytest.mark.parametrize("backend, extra", [(["learner.backend=fsdp"], ()),
                                            (["learner.backend=deepspeed", "learner.zero_stage=3"], ()),
                                            (["learner.backend=fsdp"], ("learner.minibatches=2",))],
                         ids=["fsdp2", "deepspeed-zero3", "fsdp2-minibatches"])
def test_two_ranks_equal_one(reference, make_cfg, backend, extra):
    model_path, items, one_rank = reference
    ref_stats, ref_weights = one_rank(extra)
    cfg = make_cfg(*COMMON, "learner.num_workers=2", *backend, *extra)
    stats, weights = train_twice(cfg, model_path, items, backend[0].split("=")[1] + str(len(extra)))
    for step in range(2):
        assert stats[step]["loss"] == pytest.approx(ref_stats[step]["loss"], abs=1e-5), step
    assert weights.keys() == ref_weights.keys()
    worst = max((weights[n] - ref_weights[n]).abs().max().item() for n in weights)
    assert worst <= 1e-5, worst
    moved = max((ref_weights[n] - w0).abs().max().item() for n, w0 in _initial(model_path).items())
    assert moved > 5e-5  # training really changed the weights (two Adam steps of lr 1e-4)


def _initial(model_path):
    from rayrl.models.policy import load_policy

    return dict(load_policy(model_path)[0].named_parameters())
