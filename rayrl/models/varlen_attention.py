"""Padding-free attention for GPU learners: PyTorch's built-in FlashAttention-2 varlen kernel (forward
and backward) behind transformers' AttentionInterface, under the name VARLEN.

Packed micro-batches pass cu_seq_lens_q / max_length_q (transformers' flash-attention kwargs), so a
row of many sequences costs no [tokens × tokens] mask; padded rows are unpadded by their 2-D mask.
"""

from __future__ import annotations

import torch
from transformers import AttentionInterface
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

VARLEN = "rayrl_varlen"


def flash_varlen(q, k, v, cu: torch.Tensor, max_len: int, scale: float | None) -> torch.Tensor:
    """q [T, H, D], k / v [T, Hkv, D] (GQA is native to the kernel), causal within each sequence."""
    return torch.ops.aten._flash_attention_forward(q, k, v, cu, cu, max_len, max_len, 0.0, True, False,
                                                   scale=scale)[0]


def _starts(position_ids: torch.Tensor | None, b: int, length: int, device) -> tuple[torch.Tensor, int]:
    """Sequence offsets of b rows of `length` tokens laid end to end: each row starts one, and so does
    every restart of position_ids inside a row (a packed row passed without its cu_seq_lens)."""
    if position_ids is None:
        starts = torch.arange(0, b * length, length, device=device)
    else:
        starts = (position_ids.expand(b, length).reshape(-1) == 0).nonzero().squeeze(-1)
    cu = torch.cat([starts, starts.new_tensor([b * length])]).to(torch.int32)
    return cu, int(cu.diff().max())


def varlen_attention_forward(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """transformers' attention signature: query [B, H, L, D]; returns ([B, L, H, D], None)."""
    if dropout:
        raise ValueError(f"{VARLEN} attention runs without dropout; set the model's attention_dropout to 0")
    b, _, length, _ = query.shape
    q, k, v = (t.transpose(1, 2) for t in (query, key, value))  # [B, L, heads, D]
    if kwargs.get("cu_seq_lens_q") is not None:  # packed: one row of many sequences
        if b != 1:
            raise ValueError(f"packed micro-batches are one row; got {b} rows with cu_seq_lens_q")
        out = flash_varlen(q[0], k[0], v[0], kwargs["cu_seq_lens_q"].to(torch.int32), kwargs["max_length_q"], scaling)
        return out.unsqueeze(0), None
    if attention_mask is None:  # no padding: a sequence starts wherever position_ids restart at 0
        cu, max_len = _starts(kwargs.get("position_ids"), b, length, query.device)
        out = flash_varlen(*(t.reshape(b * length, *t.shape[2:]) for t in (q, k, v)), cu, max_len, scaling)
        return out.view(b, length, *out.shape[1:]), None
    keep = attention_mask.reshape(-1).nonzero().squeeze(-1)  # padded rows: drop the pads, then put them back
    lengths = attention_mask.sum(-1, dtype=torch.int32)
    cu = torch.nn.functional.pad(lengths.cumsum(0, dtype=torch.int32), (1, 0))
    packed = [t.reshape(b * length, *t.shape[2:])[keep] for t in (q, k, v)]
    out = flash_varlen(*packed, cu, int(lengths.max()), scaling)
    full = out.new_zeros(b * length, *out.shape[1:]).index_copy_(0, keep, out)
    return full.view(b, length, *out.shape[1:]), None


AttentionInterface.register(VARLEN, varlen_attention_forward)
# the flash-attention mask: None when fully causal, else the 2-D padding mask (never a [L × L] mask)
AttentionMaskInterface.register(VARLEN, ALL_MASK_ATTENTION_FUNCTIONS["flash_attention_2"])
