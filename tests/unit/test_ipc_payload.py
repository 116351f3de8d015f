"""sync.transport=ipc's handles travel once per sync group, later syncs only their key; and the receiver's cast
of the learner's fp32 parameters (in place) gives the bits the learner's own cast gave (packed)."""

import msgspec
import pytest
import torch

from rayrl.engines.rollout.direct_write import DirectWriter, plan_slots
from rayrl.engines.transport.base import BucketPlan, TensorSpec
from rayrl.engines.transport.ipc import IpcPayload, IpcRef, IpcTransport, PayloadCache, SharedBuffer, from_builtins


def _payload(key: int) -> IpcPayload:
    shared = SharedBuffer("GPU-0", 64, 0, b"\x01handle", 256, 0, b"counter", 0, b"\x00event", True)
    return IpcPayload(BucketPlan([[TensorSpec("w", (4, 4), "float32")]], 64), [shared], key)


def test_payloads_and_keys_survive_the_plain_data_of_vllms_rpc():
    payload, ref = _payload(7), IpcRef(7)
    assert from_builtins(msgspec.to_builtins(payload, builtin_types=(bytes,))) == payload
    assert from_builtins(msgspec.to_builtins(ref)) == ref


def test_a_key_resolves_only_to_the_payload_received_before_it():
    cache = PayloadCache()
    with pytest.raises(RuntimeError, match="buffers 7 were never received here"):
        cache.resolve(IpcRef(7))
    assert cache.resolve(_payload(7)) == _payload(7)
    assert cache.resolve(IpcRef(7)) == _payload(7)
    with pytest.raises(RuntimeError, match="buffers 8 were never received here.*rejoin"):
        cache.resolve(IpcRef(8))  # the sender re-shared (a new group) but this receiver missed the payload


def test_a_receiver_that_never_opened_the_buffers_refuses_their_key():
    with pytest.raises(RuntimeError, match="buffers 3 were never received here"):
        IpcTransport().receive(IpcRef(3))


def test_the_engines_cast_of_fp32_parameters_equals_the_learners_cast():
    g = torch.Generator().manual_seed(0)
    sources = {"a.weight": torch.randn(6, 5, generator=g) * 3, "b.weight": torch.randn(5, generator=g) / 7}
    params = {n: torch.zeros(t.shape, dtype=torch.bfloat16) for n, t in sources.items()}
    specs = [TensorSpec(n, tuple(t.shape), "float32") for n, t in sources.items()]
    slots, why = plan_slots(specs, params, {})
    assert slots is not None, why
    DirectWriter(slots).write(params, sources.items())  # in place: fp32 in, cast on the engine's side
    for name, t in sources.items():
        packed = torch.empty_like(params[name])
        torch._foreach_copy_([packed], [t])  # packed: the learner casts into its bucket
        assert torch.equal(params[name].view(torch.int16), packed.view(torch.int16)), name
        assert torch.equal(params[name], t.to(torch.bfloat16))
