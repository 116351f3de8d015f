"""The vLLM side of sync.transport=ipc: a worker extension (vLLM's worker_extension_cls) called through
collective_rpc with plain-data handles, so vLLM's RPC stays free of pickle.

The first sync opens the learner's buffers (in place: its parameters; else its buckets), later ones bring
only their key and reuse them. Each writes every tensor into vLLM's parameters directly, cast on the way
(rayrl.engines.rollout.direct_write); a model the direct write does not cover takes vLLM's load_weights.
"""

from __future__ import annotations

import time

import torch

from rayrl.engines.rollout.direct_write import DirectWriter, plan_slots
from rayrl.engines.rollout.vllm_lora_slots import LoraSlotsExtension
from rayrl.engines.transport.ipc import IpcPayload, IpcTransport, from_builtins


class RayrlIpcExtension(LoraSlotsExtension):
    """Mixed into vLLM's worker class: `self` is the worker, which holds the model runner."""

    def rayrl_receive_lora_ipc(self, payload: dict, scaling: float) -> dict:
        """lora.enabled: the learner's adapter buckets, opened here and written into vLLM's LoRA slot."""
        t0 = time.perf_counter()
        payload = from_builtins(payload)
        if not hasattr(self, "_rayrl_lora_ipc"):
            self._rayrl_lora_ipc = IpcTransport()
        written = self._rayrl_lora_slots().write(self._rayrl_lora_ipc.receive(payload), scaling)
        torch.cuda.synchronize()  # done reading before the learner may write the buckets again
        return {"path": "lora_in_place", "tensors": written, "seconds": time.perf_counter() - t0}

    def rayrl_receive_ipc(self, payload: dict) -> dict:
        t0 = time.perf_counter()
        payload = from_builtins(payload)
        model = self._rayrl_model()
        if not hasattr(self, "_rayrl_ipc"):
            self._rayrl_ipc, self._rayrl_plan, self._rayrl_writer = IpcTransport(), None, (None, "")
        params = dict(model.named_parameters())
        if isinstance(payload, IpcPayload) and self._rayrl_plan != payload.plan:  # the map: once per bucket plan
            specs = [s for bucket in payload.plan.buckets for s in bucket]
            vocab_rows = {f"{name}.weight": m.org_vocab_size for name, m in model.named_modules()
                          if hasattr(m, "org_vocab_size") and f"{name}.weight" in params}
            slots, why = plan_slots(specs, params, getattr(model, "packed_modules_mapping", {}) or {}, vocab_rows)
            self._rayrl_writer = (DirectWriter(slots, vocab_rows) if slots is not None else None, why)
            self._rayrl_plan = payload.plan
        writer, why = self._rayrl_writer
        tensors = self._rayrl_ipc.receive(payload)
        if writer is not None:
            writer.write(params, tensors)
        else:
            model.load_weights(tensors)
        torch.cuda.synchronize()  # done reading before the learner may write the buckets again
        return {"path": "direct" if writer is not None else "load_weights", "why": why,
                "seconds": time.perf_counter() - t0}
