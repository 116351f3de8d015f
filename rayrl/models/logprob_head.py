"""An lm_head that scores tokens without materialising the [tokens × vocab] logits: inside `scoring()`
it returns each target token's log-prob, computed chunk by chunk in fp32 (recomputed in backward, unless
the rows fit in one chunk: then the logits are kept for the backward, which holds them at that point anyway).

It keeps a learner's micro-batches large (full fp32 logits of a 152k vocabulary are 0.6 MB a token)
and gives bf16 learners fp32 logits, as vLLM's head_dtype=float32 does (vllm.lm_head_fp32).
Outside `scoring()` it is exactly nn.Linear, so generation and HF export see a plain lm_head.
"""

from __future__ import annotations

import functools
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


def _chunk_entropy(z: torch.Tensor, lse: torch.Tensor, inv_t: float) -> torch.Tensor:
    """Entropy [n] of softmax(z / T): lse - E_p[z / T]."""
    zt = z * inv_t
    return lse - (torch.exp(zt - lse[:, None]) * zt).sum(-1)


def _chunk_entropy_grad(z: torch.Tensor, lse: torch.Tensor, entropy: torch.Tensor, g: torch.Tensor,
                        inv_t: float) -> torch.Tensor:
    """d(sum g · entropy) / d logits = -g · p · (z / T - E_p[z / T]) / T, in fp32."""
    zt = z * inv_t
    return -g[:, None] * torch.exp(zt - lse[:, None]) * (zt - (lse - entropy)[:, None]) * inv_t


@functools.cache
def _fused(fn):
    """learner.compile: one fused kernel instead of five passes over a [chunk × vocab] fp32 tensor. Wrapped on
    first use: importing torch's compiler takes seconds, which only a compiled learner's process should pay."""
    return torch.compile(fn, dynamic=True)


class _ChunkedTokenLogprobs(torch.autograd.Function):
    """log softmax(hidden @ weightᵀ / T)[target] per row, `chunk` rows at a time; with_entropy: [n, 2],
    the log-prob and the distribution's entropy per row (the entropy bonus), else [n]."""

    @staticmethod
    def forward(ctx, hidden, weight, targets, temperature: float, chunk: int, compiled: bool, with_entropy: bool):
        scores_of = _fused(_chunk_scores) if compiled else _chunk_scores
        out = torch.empty(hidden.shape[0], 2 if with_entropy else 1, dtype=torch.float32, device=hidden.device)
        lse = torch.empty(hidden.shape[0], dtype=torch.float32, device=hidden.device)
        for s in range(0, hidden.shape[0], chunk):
            z = _fp32_logits(hidden[s: s + chunk], weight)
            out[s: s + chunk, 0], lse[s: s + chunk] = scores_of(z, targets[s: s + chunk], 1.0 / temperature)
            if with_entropy:
                out[s: s + chunk, 1] = _chunk_entropy(z, lse[s: s + chunk], 1.0 / temperature)
        # one chunk: keep its logits (the backward's recomputed chunk would take the same memory), saving a GEMM
        ctx.logits = z if 0 < hidden.shape[0] <= chunk else None
        ctx.save_for_backward(hidden, weight, targets, lse, out[:, 1] if with_entropy else lse)
        ctx.inv_t, ctx.chunk, ctx.compiled, ctx.with_entropy = 1.0 / temperature, chunk, compiled, with_entropy
        return out if with_entropy else out.squeeze(1)

    @staticmethod
    def backward(ctx, grad_out):
        hidden, weight, targets, lse, entropy = ctx.saved_tensors
        grad_of = _fused(_chunk_grad) if ctx.compiled else _chunk_grad
        g_logp = grad_out[:, 0] if ctx.with_entropy else grad_out
        grad_hidden = torch.empty_like(hidden) if ctx.needs_input_grad[0] else None
        kept, ctx.logits, grad_weight = ctx.logits, None, None
        for s in range(0, hidden.shape[0], ctx.chunk):
            rows = slice(s, s + ctx.chunk)
            h = hidden[rows]
            z = kept if kept is not None else _fp32_logits(h, weight)
            dz = grad_of(z, lse[rows], g_logp[rows].float(), targets[rows], ctx.inv_t, weight.dtype)
            if ctx.with_entropy:
                dz = (dz.float() + _chunk_entropy_grad(z, lse[rows], entropy[rows], grad_out[rows, 1].float(),
                                                       ctx.inv_t)).to(weight.dtype)
            if grad_hidden is not None:
                grad_hidden[rows] = (dz @ weight).to(hidden.dtype)
            if ctx.needs_input_grad[1]:  # chunks sum in fp32; one chunk's product is the gradient as it is
                part = dz.t() @ h.to(weight.dtype)
                if grad_weight is None:
                    grad_weight = part if kept is not None else part.float()
                else:
                    grad_weight += part
        return grad_hidden, None if grad_weight is None else grad_weight.to(weight.dtype), None, None, None, None, None


class TokenLogprobHead(nn.Linear):
    """A bias-free lm_head; within `scoring(head, targets, T)` its output is [.., seq] target log-probs
    ([.., seq, 2] with the entropy when scoring(..., entropy=True))."""

    def __init__(self, in_features: int, out_features: int, chunk: int, compiled: bool = False, **kwargs) -> None:
        super().__init__(in_features, out_features, bias=False, **kwargs)
        self.chunk, self.compiled = chunk, compiled
        self._targets: torch.Tensor | None = None
        self._temperature = 1.0
        self._entropy = False

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        if self._targets is None:
            return super().forward(hidden)
        flat = hidden.reshape(-1, hidden.shape[-1])
        out = _ChunkedTokenLogprobs.apply(flat, self.weight, self._targets.reshape(-1), self._temperature,
                                          self.chunk, self.compiled, self._entropy)
        return out.view(*hidden.shape[:-1], 2) if self._entropy else out.view(hidden.shape[:-1])


@contextmanager
def scoring(head: TokenLogprobHead, targets: torch.Tensor, temperature: float,
            entropy: bool = False) -> Iterator[None]:
    """While open, the model's forward returns log p(targets[b, t] | tokens <= t) in place of logits
    (stacked with each position's entropy when entropy is True)."""
    head._targets, head._temperature, head._entropy = targets, temperature, entropy
    try:
        yield
    finally:
        head._targets, head._entropy = None, False


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
