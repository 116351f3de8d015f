"""The operations of the bitwise on-policy mode (rollout.bitwise_on_policy): each forward runs the very
CUDA / Triton kernel vLLM's batch-invariant mode runs, each backward is a plain PyTorch recompute (correct,
not bitwise). vLLM's worker and the learner both take the residual norm from `add_rms_norm` here.

Inside `native_kernels()` the matmuls and norms run PyTorch's own (faster) kernels instead: for an activation
checkpoint's recompute, whose activations feed only the backward."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import torch
import torch.nn.functional as F

_native: ContextVar[bool] = ContextVar("rayrl_bitwise_native_kernels", default=False)


@contextmanager
def native_kernels() -> Iterator[None]:
    """While open, linear and RMSNorm run PyTorch's kernels (same math and saved tensors, not vLLM's bits)."""
    token = _native.set(True)
    try:
        yield
    finally:
        _native.reset(token)


def _vjp(native, inputs: tuple, grads: tuple) -> tuple:
    """Gradients of `native` (a PyTorch reference of the kernel) at `inputs`, computed in fp32."""
    with torch.enable_grad():
        xs = [x.detach().float().requires_grad_() for x in inputs]
        outs = native(*xs)
        outs = outs if isinstance(outs, tuple) else (outs,)
        got = torch.autograd.grad(outs, xs, [g.float() for g in grads])
    return tuple(g.to(x.dtype) for g, x in zip(got, inputs))


# ---- RMSNorm: vLLM's batch-invariant Triton kernel (fixed 1024-wide blocks, one program per row) ----
def rms_norm_native(x, weight, eps: float):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


class _RMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps):
        ctx.save_for_backward(x, weight)
        ctx.eps = eps
        if _native.get():
            return F.rms_norm(x.float(), x.shape[-1:], weight.float(), eps).to(x.dtype)
        from vllm.model_executor.layers.batch_invariant import rms_norm_batch_invariant

        return rms_norm_batch_invariant(x, weight, eps)

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        return (*_vjp(lambda a, w: rms_norm_native(a, w, ctx.eps), (x, weight), (grad,)), None)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return _RMSNorm.apply(x, weight, eps)


def add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float):
    """The residual norm of this mode, on both sides: a bf16 add, then the row-wise Triton norm. vLLM 0.26
    runs a CUDA kernel here whose block size changes at 256 tokens per step, which breaks invariance."""
    residual = x + residual
    return rms_norm(residual, weight, eps), residual


# ---- linear: vLLM's unquantized linear in this mode (its GEMM, then the bias added in bf16) -------
class _Linear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        if _native.get():
            out = F.linear(x, weight)
            return out if bias is None else out + bias
        from vllm.model_executor.layers.batch_invariant import linear_batch_invariant

        return linear_batch_invariant(x, weight, bias)

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        return grad @ weight, grad.t() @ x, grad.sum(0) if ctx.has_bias else None


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x [T, in] @ weight.T + bias as vLLM's layers compute it here: the bias is added to the bf16 product
    (rounded twice), not fused into the GEMM as F.linear fuses it (rounded once)."""
    return _Linear.apply(x, weight, bias)


# ---- the sampler's log-probs: vLLM's kernels on the logits as its sampler holds them ------------------
class _Temperature(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, temperature: float):
        from vllm.v1.worker.gpu.sample.gumbel import apply_temperature

        out = logits.to(torch.float32, memory_format=torch.contiguous_format, copy=True)  # one fresh fp32 copy
        rows = torch.zeros(out.shape[0], dtype=torch.int32, device=out.device)  # every row is request 0
        apply_temperature(out, rows, torch.tensor([temperature], dtype=torch.float32, device=out.device))
        ctx.temperature, ctx.dtype = temperature, logits.dtype
        return out

    @staticmethod
    def backward(ctx, grad):
        return (grad / ctx.temperature).to(ctx.dtype), None


def sampler_logits(logits: torch.Tensor, temperature: float, row_stride: int) -> torch.Tensor:
    """Logits [n, V] laid out as vLLM's V2 sampler scores them. At temperature 0 or 1: the lm_head's rows as they
    are (model dtype, row_stride apart: the padded vocabulary). Otherwise: an fp32 copy divided by vLLM's Triton
    kernel (Triton's fp32 `/` is div.full, up to 2 ulp from torch's). Triton specialises its log-prob kernel on
    the dtype and stride, and the specialisation sets the order of its sums."""
    if temperature not in (0.0, 1.0):
        return _Temperature.apply(logits, temperature)
    return logits if logits.stride() == (row_stride, 1) else strided_rows(logits, row_stride)


def strided_rows(rows: torch.Tensor, row_stride: int) -> torch.Tensor:
    """rows [n, V] copied into a buffer whose rows are row_stride apart (V <= row_stride), as a view of its first V
    columns: the layout of vLLM's lm_head output after it drops the padded vocabulary."""
    buffer = rows.new_empty(rows.shape[0], row_stride)
    buffer[:, : rows.shape[1]] = rows
    return buffer[:, : rows.shape[1]]


class _TokenLogprobs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, targets):
        from vllm.v1.worker.gpu.sample.logprob import compute_token_logprobs

        out = compute_token_logprobs(logits, targets[:, None])[:, 0]
        ctx.save_for_backward(logits, targets)
        return out

    @staticmethod
    def backward(ctx, grad):
        logits, targets = ctx.saved_tensors
        d = torch.softmax(logits, -1, dtype=torch.float32).mul_(-grad[:, None])  # d log p[target] = onehot - softmax
        return d.scatter_add_(-1, targets[:, None], grad[:, None]).to(logits.dtype), None


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Logits [n, V] from sampler_logits -> log p(targets) [n] (fp32), computed as vLLM's sampler computes the
    log-probs it returns: max, then the sum of exponentials, then logit - max - log(sum), in one Triton kernel."""
    return _TokenLogprobs.apply(logits, targets)


# ---- rotary: vLLM's CUDA kernel (neox style, in place) on copies --------------------------------
def rope_cache(head_dim: int, base: float, max_positions: int, device, dtype) -> torch.Tensor:
    """[positions, head_dim]: cos then sin, computed as vLLM's RotaryEmbedding computes them (fp32 on the
    device, then cast), so both sides rotate by the same bf16 numbers."""
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float, device=device) / head_dim))
    t = torch.arange(max_positions, dtype=torch.float, device=device)
    freqs = torch.einsum("i,j -> ij", t, inv_freq)
    return torch.cat((freqs.cos(), freqs.sin()), dim=-1).to(dtype)


def rope_native(x, cos, sin):
    """x [T, heads, D] in neox halves; cos / sin [T, 1, D/2]."""
    a, b = x.chunk(2, -1)
    return torch.cat((a * cos - b * sin, b * cos + a * sin), -1)


class _Rope(torch.autograd.Function):
    @staticmethod
    def forward(ctx, positions, q, k, cache, head_dim):
        from vllm import _custom_ops as ops

        q, k = q.clone(), k.clone()
        ops.rotary_embedding(positions, q, k, head_dim, cache, True)
        ctx.save_for_backward(positions, cache)
        ctx.head_dim = head_dim
        return q, k

    @staticmethod
    def backward(ctx, gq, gk):
        positions, cache = ctx.saved_tensors
        cos, sin = cache[positions].float().unsqueeze(1).chunk(2, -1)
        d = ctx.head_dim
        # the rotation's transpose is the rotation by -angle
        back = [rope_native(g.float().reshape(g.shape[0], -1, d), cos, -sin).reshape(g.shape).to(g.dtype)
                for g in (gq, gk)]
        return None, back[0], back[1], None, None


def rope(positions, q, k, cache, head_dim: int):
    return _Rope.apply(positions, q, k, cache, head_dim)


# ---- SiLU-and-multiply: vLLM's CUDA kernel ------------------------------------------------------
def silu_and_mul_native(x):
    gate, up = x.chunk(2, -1)
    return F.silu(gate) * up


class _SiluAndMul(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        import vllm._custom_ops  # noqa: F401  (loads vLLM's CUDA ops into torch.ops._C)

        out = x.new_empty(*x.shape[:-1], x.shape[-1] // 2)
        torch.ops._C.silu_and_mul(out, x)
        ctx.save_for_backward(x)
        return out

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return _vjp(silu_and_mul_native, (x,), (grad,))


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    return _SiluAndMul.apply(x)


# ---- attention: vLLM's FlashAttention over a paged KV cache, as its decoder reads it --------------
@dataclass(frozen=True)
class PagedLayout:
    """A packed row's sequences in a paged KV cache, each from a fresh page, as vLLM's scheduler lays out a
    prefill: built once per forward (on the host, one copy of cu) and read by every layer, so no layer waits
    on the device for sizes."""

    cu: torch.Tensor  # int32 [sequences + 1], on the device
    max_len: int
    slots: torch.Tensor  # [tokens]: each token's slot in the cache
    table: torch.Tensor  # int32 [sequences, pages]: the block table that reads them back
    n_pages: int
    block_size: int


def paged_layout(cu: torch.Tensor, max_len: int, block_size: int) -> PagedLayout:
    host = cu.cpu().long()
    lengths = host.diff()
    pages = (lengths + block_size - 1) // block_size
    first = F.pad(pages.cumsum(0), (1, 0))[:-1]
    seq = torch.repeat_interleave(torch.arange(len(lengths)), lengths)
    slots = first[seq] * block_size + torch.arange(int(host[-1])) - host[:-1][seq]
    table = first[:, None] + torch.arange(int(pages.max()))[None]
    table = torch.where(table < (first + pages)[:, None], table, 0)
    return PagedLayout(cu.to(torch.int32), max_len, slots.to(cu.device), table.to(torch.int32).to(cu.device),
                       int(table.max()) + 1, block_size)


class _PagedAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, layout: PagedLayout, scale):
        from vllm.v1.attention.backends.fa_utils import get_flash_attn_version
        from vllm.vllm_flash_attn import flash_attn_varlen_func

        kc, vc = (t.new_zeros(layout.n_pages * layout.block_size, *t.shape[1:]) for t in (k, v))
        kc[layout.slots], vc[layout.slots] = k, v
        kc, vc = (t.view(layout.n_pages, layout.block_size, *t.shape[1:]) for t in (kc, vc))
        cu, n = layout.cu, layout.max_len
        descale = torch.ones(len(cu) - 1, k.shape[1], dtype=torch.float32, device=q.device)
        out = flash_attn_varlen_func(q=q, k=kc, v=vc, max_seqlen_q=n, cu_seqlens_q=cu, max_seqlen_k=n,
                                     seqused_k=cu.diff(), softmax_scale=scale, causal=True,
                                     window_size=[-1, -1], block_table=layout.table, softcap=0.0, k_descale=descale,
                                     v_descale=descale, num_splits=1, fa_version=get_flash_attn_version())
        ctx.save_for_backward(q, k, v)
        ctx.layout, ctx.scale = layout, scale
        return out

    @staticmethod
    def backward(ctx, grad):
        from rayrl.models.varlen_attention import flash_varlen

        with torch.enable_grad():  # PyTorch's FlashAttention-2 in the inputs' bf16: recomputed, then its backward
            xs = [t.detach().requires_grad_() for t in ctx.saved_tensors]
            out = flash_varlen(*xs, ctx.layout.cu, ctx.layout.max_len, ctx.scale)
            grads = torch.autograd.grad(out, xs, grad)
        return (*grads, None, None)


def paged_attention(q, k, v, layout: PagedLayout, scale: float) -> torch.Tensor:
    """q [T, heads, D], k / v [T, kv_heads, D], causal within each sequence of the packed row."""
    return _PagedAttention.apply(q, k, v, layout, scale)
