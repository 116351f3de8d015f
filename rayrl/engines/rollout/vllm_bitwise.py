"""vLLM's side of rollout.bitwise_on_policy: worker extensions (vLLM's worker_extension_cls) whose import,
in the worker process and before the model is built, makes vLLM's residual norm batch-invariant.

vLLM 0.26's batch-invariant mode still runs the residual RMSNorm through its CUDA fused_add_rms_norm, whose
block size changes at 256 tokens per step: a sequence's log-probs then depend on what else is in the batch.
Here that norm becomes a bf16 add and the row-wise Triton norm (rayrl.models.bitwise_ops.add_rms_norm), the
same two kernels the learner runs. One extension per weight transport, so the mode composes with each.
"""

from __future__ import annotations

import torch

from rayrl.engines.rollout.vllm_gloo_engine import RayrlWorkerExtension
from rayrl.engines.rollout.vllm_ipc_extension import RayrlIpcExtension
from rayrl.engines.transport.ipc import from_builtins
from rayrl.models.bitwise_qwen2 import digests


def use_fixed_order_residual_norm() -> None:
    """Points vLLM's RMSNorm (which looks the function up at call time) at the fixed-order residual norm;
    the plain norm stays vLLM's batch-invariant Triton kernel. Idempotent."""
    from vllm.model_executor.layers import layernorm

    from rayrl.models.bitwise_ops import add_rms_norm

    original = getattr(layernorm.rms_norm_batch_invariant, "rayrl_original", layernorm.rms_norm_batch_invariant)

    def fixed_order(x: torch.Tensor, weight, eps: float = 1e-6, residual: torch.Tensor | None = None):
        if residual is None:
            return original(x, weight, eps)
        return add_rms_norm(x, residual, weight, eps)

    fixed_order.rayrl_original = original
    layernorm.rms_norm_batch_invariant = fixed_order


class BitwiseExtension:
    """sync.transport=nccl: vLLM's own weight transfer, no methods of ours."""


class BitwiseGlooExtension(RayrlWorkerExtension):
    """sync.transport=gloo."""


class BitwiseIpcExtension(RayrlIpcExtension):
    """sync.transport=ipc; after each direct write, every parameter row compared with the tensor the learner sent
    (unequal_tensors in the sync's report: 0 when vLLM holds exactly what the learner sent)."""

    def rayrl_receive_ipc(self, payload: dict) -> dict:
        out = super().rayrl_receive_ipc(payload)
        writer = self._rayrl_writer[0]
        if writer is None:
            return out
        params = dict(self._rayrl_model().named_parameters())
        sent = [t for _, t in self._rayrl_ipc.receive(from_builtins(payload))]
        unequal = [s.name for s, t in zip(writer.slots, sent)
                   if not torch.equal(params[s.param].data[s.start: s.stop], t)]
        self._rayrl_written = list(zip(writer.slots, digests(sent)))
        return {**out, "unequal_tensors": len(unequal), "unequal_names": unequal[:4]}

    def rayrl_recheck_rows(self) -> dict:
        """The rows the last sync wrote, compared again now (after the engine woke its cache, say) with what
        it received: tensors changed since the write."""
        params = dict(self._rayrl_model().named_parameters())
        written = getattr(self, "_rayrl_written", [])
        now = digests([params[s.param].data[s.start: s.stop] for s, _ in written])
        changed = [s.name for (s, d), n in zip(written, now) if d != n]
        return {"changed_tensors": len(changed), "changed_names": changed[:4], "checked": len(written)}


use_fixed_order_residual_norm()
