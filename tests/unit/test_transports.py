"""Each transport is one TransportPlan: no branch on a transport's name outside rayrl/engines/transport and the
registry, and the gloo engine's trainer-side call (vLLM's trainer_send_weights) sends what the receiver gets."""

from __future__ import annotations

import re
import threading
import uuid
from pathlib import Path

import pytest
import torch

from rayrl.engines.registry import WEIGHT_TRANSPORTS, transport_plan
from rayrl.engines.transport.base import GroupInfo, TensorSpec, plan_buckets
from rayrl.engines.transport.gloo import GlooTransport

ROOT = Path(__file__).resolve().parents[2]
NAME_BRANCH = re.compile(r"""transport\w*\s*(==|!=|in)\s*[("'\[]""")


def test_no_branch_on_a_transport_name_outside_the_transports():
    found = [f"{p.relative_to(ROOT)}:{i}: {line.strip()}"
             for d in ("rayrl", "actors", "placement") for p in (ROOT / d).rglob("*.py")
             if "engines/transport" not in p.as_posix() and p.name != "registry.py"
             for i, line in enumerate(p.read_text().splitlines(), 1) if NAME_BRANCH.search(line)]
    assert not found, found


@pytest.mark.parametrize("name", sorted(WEIGHT_TRANSPORTS))
def test_every_registered_transport_has_every_end(name):
    plan = transport_plan(name)
    assert plan.name == name and isinstance(plan.collective, bool)
    assert plan.sender(in_place=False) is not None
    assert plan.vllm_receiver(bitwise=True).engine_args()["worker_extension_cls"].startswith("rayrl.engines.rollout")


def test_an_unknown_transport_is_named():
    with pytest.raises(ValueError, match="unknown sync.transport 'shm'; registered: gloo, ipc, nccl"):
        transport_plan("shm")


def test_the_gloo_engine_trainer_call_sends_what_the_receiver_gets():
    from rayrl.engines.rollout.vllm_gloo_engine import GlooWeightTransferEngine

    tensors = [("a", torch.arange(6, dtype=torch.float32).view(2, 3)), ("b", torch.ones(5, dtype=torch.bfloat16))]
    plan = plan_buckets([TensorSpec(n, tuple(t.shape), str(t.dtype).removeprefix("torch.")) for n, t in tensors], 16)
    key = uuid.uuid4().hex
    ends = [GlooTransport(), GlooTransport()]
    got: list = []

    def receive():
        ends[1].init(GroupInfo("127.0.0.1", 0, 2, 1, 30.0, key))
        got.extend(ends[1].receive(plan))

    thread = threading.Thread(target=receive)
    thread.start()
    ends[0].init(GroupInfo("127.0.0.1", 0, 2, 0, 30.0, key))
    GlooWeightTransferEngine.trainer_send_weights(iter(tensors), {"transport": ends[0], "plan": plan})
    thread.join(30)
    assert len(plan.buckets) == 2
    assert [n for n, _ in got] == ["a", "b"]
    assert all(torch.equal(t, r) for (_, t), (_, r) in zip(tensors, got))
