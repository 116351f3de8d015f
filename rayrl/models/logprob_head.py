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


def _chunk_scores(z: torch.Tensor, targets: torch.Tensor, inv_t: float) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 logits [n, V] -> (target log-probs [n], logsumexp [n]) at temperature 1 / inv_t."""
    z = z * inv_t
    lse = torch.logsumexp(z, -1)
    return z.gather(-1, targets[:, None]).squeeze(-1) - lse, lse


def _chunk_grad(z: torch.Tensor, lse: torch.Tensor, g: torch.Tensor, targets: torch.Tensor, inv_t: float,
                dtype: torch.dtype) -> torch.Tensor:
    """d(sum g · score) / d logits = g · (onehot(target) - softmax) / T, in the weight's dtype."""
    p = torch.exp(z * inv_t - lse[:, None])
    return ((-g[:, None] * p).scatter_add(-1, targets[:, None], g[:, None]) * inv_t).to(dtype)


# learner.compile: one fused kernel each instead of five passes over a [chunk × vocab] fp32 tensor
# (torch.compile is lazy: nothing compiles until a compiled learner first calls them)
_chunk_scores_fused = torch.compile(_chunk_scores, dynamic=True)
_chunk_grad_fused = torch.compile(_chunk_grad, dynamic=True)


class _ChunkedTokenLogprobs(torch.autograd.Function):
    """log softmax(hidden @ weightᵀ / T)[target] per row, `chunk` rows at a time."""

    @staticmethod
    def forward(ctx, hidden, weight, targets, temperature: float, chunk: int, compiled: bool):
        scores_of = _chunk_scores_fused if compiled else _chunk_scores
        out = torch.empty(hidden.shape[0], dtype=torch.float32, device=hidden.device)
        lse = torch.empty_like(out)
        for s in range(0, hidden.shape[0], chunk):
            out[s: s + chunk], lse[s: s + chunk] = scores_of(_fp32_logits(hidden[s: s + chunk], weight),
                                                             targets[s: s + chunk], 1.0 / temperature)
        ctx.save_for_backward(hidden, weight, targets, lse)
        ctx.inv_t, ctx.chunk, ctx.compiled = 1.0 / temperature, chunk, compiled
        return out

    @staticmethod
    def backward(ctx, grad_out):
        hidden, weight, targets, lse = ctx.saved_tensors
        grad_of = _chunk_grad_fused if ctx.compiled else _chunk_grad
        grad_hidden = torch.empty_like(hidden) if ctx.needs_input_grad[0] else None
        grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) \
            if ctx.needs_input_grad[1] else None
        for s in range(0, hidden.shape[0], ctx.chunk):
            rows = slice(s, s + ctx.chunk)
            h = hidden[rows]
            dz = grad_of(_fp32_logits(h, weight), lse[rows], grad_out[rows].float(), targets[rows], ctx.inv_t,
                         weight.dtype)
            if grad_hidden is not None:
                grad_hidden[rows] = (dz @ weight).to(hidden.dtype)
            if grad_weight is not None:
                grad_weight += (dz.t() @ h.to(weight.dtype)).float()
        return grad_hidden, None if grad_weight is None else grad_weight.to(weight.dtype), None, None, None, None


class TokenLogprobHead(nn.Linear):
    """A bias-free lm_head; within `scoring(head, targets, T)` its output is [.., seq] target log-probs."""

    def __init__(self, in_features: int, out_features: int, chunk: int, compiled: bool = False, **kwargs) -> None:
        super().__init__(in_features, out_features, bias=False, **kwargs)
        self.chunk, self.compiled = chunk, compiled
        self._targets: torch.Tensor | None = None
        self._temperature = 1.0

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        if self._targets is None:
            return super().forward(hidden)
        flat = hidden.reshape(-1, hidden.shape[-1])
        out = _ChunkedTokenLogprobs.apply(flat, self.weight, self._targets.reshape(-1), self._temperature,
                                          self.chunk, self.compiled)
        return out.view(hidden.shape[:-1])


@contextmanager
def scoring(head: TokenLogprobHead, targets: torch.Tensor, temperature: float) -> Iterator[None]:
    """While open, the model's forward returns log p(targets[b, t] | tokens <= t) in place of logits."""
    head._targets, head._temperature = targets, temperature
    try:
        yield
    finally:
        head._targets = None


def use_logprob_head(model: nn.Module, chunk: int, compiled: bool = False) -> nn.Module:
    """Swap model.lm_head for a TokenLogprobHead sharing its weight (tied embeddings stay tied);
    compiled: fuse the per-chunk softmax arithmetic with torch.compile (learner.compile)."""
    old = model.lm_head
    if old.bias is not None:
        raise ValueError(f"{type(model).__name__} has an lm_head bias; rayrl's learners score tokens with a "
                         "bias-free lm_head (every Qwen2 / Llama-family checkpoint is bias-free)")
    head = TokenLogprobHead(old.in_features, old.out_features, chunk, compiled, device="meta")
    head.weight = old.weight
    model.lm_head = head
    return model
