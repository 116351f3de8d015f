"""An lm_head that scores tokens without materialising the [tokens × vocab] logits: inside `scoring()`
it returns each target token's log-prob, computed chunk by chunk in fp32 (recomputed in backward).

It keeps a learner's micro-batches large (full fp32 logits of a 152k vocabulary are 0.6 MB a token)
and gives bf16 learners fp32 logits, as vLLM's head_dtype=float32 does (model.lm_head_fp32).
Outside `scoring()` it is exactly nn.Linear, so generation and HF export see a plain lm_head.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn


def _fp32_logits(hidden: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """[n, H] x [V, H] -> [n, V] fp32; on CUDA bf16 operands keep the fp32 accumulator (no fp32 copies)."""
    if hidden.is_cuda and hidden.dtype in (torch.bfloat16, torch.float16) and weight.dtype == hidden.dtype:
        return torch.mm(hidden, weight.t(), out_dtype=torch.float32)
    return hidden.float() @ weight.float().t()


class _ChunkedTokenLogprobs(torch.autograd.Function):
    """log softmax(hidden @ weightᵀ / T)[target] per row, `chunk` rows at a time."""

    @staticmethod
    def forward(ctx, hidden, weight, targets, temperature: float, chunk: int):
        out = torch.empty(hidden.shape[0], dtype=torch.float32, device=hidden.device)
        lse = torch.empty_like(out)
        for s in range(0, hidden.shape[0], chunk):
            z = _fp32_logits(hidden[s: s + chunk], weight) / temperature
            lse[s: s + chunk] = torch.logsumexp(z, -1)
            out[s: s + chunk] = z.gather(-1, targets[s: s + chunk, None]).squeeze(-1) - lse[s: s + chunk]
        ctx.save_for_backward(hidden, weight, targets, lse)
        ctx.temperature, ctx.chunk = temperature, chunk
        return out

    @staticmethod
    def backward(ctx, grad_out):
        hidden, weight, targets, lse = ctx.saved_tensors
        grad_hidden = torch.empty_like(hidden) if ctx.needs_input_grad[0] else None
        grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) \
            if ctx.needs_input_grad[1] else None
        for s in range(0, hidden.shape[0], ctx.chunk):
            h, g = hidden[s: s + ctx.chunk], grad_out[s: s + ctx.chunk].float()
            # d out / d z = onehot(target) - softmax(z); z = logits / T
            p = torch.exp(_fp32_logits(h, weight) / ctx.temperature - lse[s: s + ctx.chunk, None])
            dz = (p * -g[:, None]).scatter_add_(-1, targets[s: s + ctx.chunk, None], g[:, None]) / ctx.temperature
            dz = dz.to(weight.dtype)
            if grad_hidden is not None:
                grad_hidden[s: s + ctx.chunk] = (dz @ weight).to(hidden.dtype)
            if grad_weight is not None:
                grad_weight += (dz.t() @ h.to(weight.dtype)).float()
        return grad_hidden, None if grad_weight is None else grad_weight.to(weight.dtype), None, None, None


class TokenLogprobHead(nn.Linear):
    """A bias-free lm_head; within `scoring(head, targets, T)` its output is [.., seq] target log-probs."""

    chunk: int = 4096
    _targets: torch.Tensor | None = None
    _temperature: float = 1.0

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        if self._targets is None:
            return super().forward(hidden)
        flat = hidden.reshape(-1, hidden.shape[-1])
        out = _ChunkedTokenLogprobs.apply(flat, self.weight, self._targets.reshape(-1), self._temperature,
                                          self.chunk)
        return out.view(hidden.shape[:-1])


@contextmanager
def scoring(head: TokenLogprobHead, targets: torch.Tensor, temperature: float) -> Iterator[None]:
    """While open, the model's forward returns log p(targets[b, t] | tokens <= t) in place of logits."""
    head._targets, head._temperature = targets, temperature
    try:
        yield
    finally:
        head._targets = None


def use_logprob_head(model: nn.Module, chunk: int) -> nn.Module:
    """Swap model.lm_head for a TokenLogprobHead sharing its weight (tied embeddings stay tied)."""
    old = model.lm_head
    if old.bias is not None:
        raise ValueError(f"{type(model).__name__} has an lm_head bias; rayrl's learners score tokens with a "
                         "bias-free lm_head (every Qwen2 / Llama-family checkpoint is bias-free)")
    head = TokenLogprobHead(old.in_features, old.out_features, bias=False, device="meta")
    head.weight = old.weight
    head.chunk = chunk
    model.lm_head = head
    return model
