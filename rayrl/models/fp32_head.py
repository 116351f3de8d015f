"""An lm_head that returns fp32 logits from bf16 hidden states and weights, as vLLM does with
hf_overrides={"head_dtype": "float32"} (model.lm_head_fp32): it removes the bf16 rounding of large
logits (a step of 1/8 at |logit| ~ 20) from the learner/rollout log-prob comparison."""

from __future__ import annotations

import torch
from torch import nn


class _Fp32Logits(torch.autograd.Function):
    """hidden [.., H] x weight [V, H] -> fp32 logits [.., V]; gradients in the operands' dtype."""

    @staticmethod
    def forward(ctx, hidden: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(hidden, weight)
        flat = hidden.reshape(-1, hidden.shape[-1])
        if flat.is_cuda and flat.dtype in (torch.bfloat16, torch.float16) and weight.dtype == flat.dtype:
            logits = torch.mm(flat, weight.t(), out_dtype=torch.float32)  # fp32 accumulator kept, no fp32 copy
        else:
            logits = flat.float() @ weight.float().t()
        return logits.reshape(*hidden.shape[:-1], -1)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        hidden, weight = ctx.saved_tensors
        g = grad.reshape(-1, grad.shape[-1]).to(weight.dtype)
        flat = hidden.reshape(-1, hidden.shape[-1])
        grad_hidden = (g @ weight).to(hidden.dtype).reshape(hidden.shape) if ctx.needs_input_grad[0] else None
        grad_weight = (g.t() @ flat.to(weight.dtype)) if ctx.needs_input_grad[1] else None
        return grad_hidden, grad_weight


class Fp32Head(nn.Linear):
    """A bias-free nn.Linear whose output is fp32; keeps the parameter name `lm_head.weight`."""

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        if hidden.dtype == torch.float32 and self.weight.dtype == torch.float32:
            return super().forward(hidden)  # already fp32: exactly nn.Linear
        return _Fp32Logits.apply(hidden, self.weight)


def use_fp32_head(model: nn.Module) -> nn.Module:
    """Swap model.lm_head for an Fp32Head sharing its weight (tied embeddings stay tied)."""
    old = model.lm_head
    if old.bias is not None:
        raise ValueError("model.lm_head_fp32 needs a bias-free lm_head; set model.lm_head_fp32=false")
    head = Fp32Head(old.in_features, old.out_features, bias=False, device="meta")
    head.weight = old.weight
    model.lm_head = head
    return model
