"""The learner's Qwen2 forward in the bitwise on-policy mode: the Hugging Face model's own parameters run
through the operations vLLM's Qwen2 runs, in its order and shapes (fused q/k/v and gate/up matmuls on
[tokens, hidden], the padded vocabulary), so its bf16 log-probs equal the rollout engine's bit for bit."""

from __future__ import annotations

import math
from contextlib import nullcontext

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint
from transformers.modeling_outputs import CausalLMOutput

from rayrl.models.bitwise_ops import (add_rms_norm, linear, native_kernels, paged_attention, paged_layout, rms_norm, rope,
                                     rope_cache, silu_and_mul)

VOCAB_PAD = 64  # vLLM pads its embedding and lm_head rows to a multiple of this


def _recompute_natively():
    """Activation checkpointing: the forward runs vLLM's kernels (its log-probs are the scored ones); the
    recompute, whose activations serve only the backward, runs PyTorch's faster matmuls and norms."""
    return nullcontext(), native_kernels()


def digests(tensors: list[torch.Tensor]) -> list[tuple[int, int]]:
    """Per tensor, the sum and the sum of squares of its bits as integers: equal tensors give equal digests, and a
    changed element changes them (a check of weights handed over, not a cryptographic hash)."""
    sums = []
    for t in tensors:
        bits = t.detach().contiguous().view(-1).view(torch.int16 if t.element_size() == 2 else torch.int32).long()
        sums.append(torch.stack([bits.sum(), (bits * bits).sum()]))
    return [tuple(x) for x in torch.stack(sums).tolist()] if sums else []


def _bf16(p: torch.Tensor) -> torch.Tensor:
    """FSDP2 hands bf16 parameters to the forward; a plain learner keeps fp32 masters and casts (differentiably)."""
    return p if p.dtype == torch.bfloat16 else p.to(torch.bfloat16)


def _rope_base(config) -> float:
    params = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    if params.get("rope_type", params.get("type", "default")) != "default":
        raise ValueError(f"bitwise on-policy mode covers plain rotary embeddings; this model scales them ({params})")
    return float(params.get("rope_theta") or getattr(config, "rope_theta", 10000.0))


class BitwiseQwen2(nn.Module):
    """Wraps a transformers Qwen2ForCausalLM (same parameter names, so checkpoints and weight syncs are
    unchanged). FSDP2 shards it as one unit: its forward reads every layer's parameters itself."""

    shard_per_layer = False
    vllm_sampler_logprobs = True  # scoring divides and takes log-probs with vLLM's sampler kernels (bitwise_ops)

    def __init__(self, hf_model, block_size: int) -> None:
        super().__init__()
        c = hf_model.config
        if c.model_type != "qwen2" or c.hidden_act != "silu" or getattr(c, "use_sliding_window", False):
            raise ValueError(f"bitwise on-policy mode covers Qwen2 (silu MLP, full attention); got model_type="
                             f"{c.model_type}, hidden_act={c.hidden_act}")
        self.model, self.lm_head, self.config = hf_model.model, hf_model.lm_head, c
        self.head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
        self.heads, self.kv_heads = c.num_attention_heads, c.num_key_value_heads
        self.padded_vocab = math.ceil(c.vocab_size / VOCAB_PAD) * VOCAB_PAD
        self.block_size, self.base, self.checkpointing = block_size, _rope_base(c), False
        self._cache: torch.Tensor | None = None
        self.seen: dict[str, tuple[int, int]] | None = None  # set to {}: the next forward's weight digests go here

    def get_output_embeddings(self):
        return self.lm_head

    def gradient_checkpointing_enable(self, **_) -> None:
        self.checkpointing = True

    def forward(self, input_ids, attention_mask=None, position_ids=None, cu_seq_lens_q=None, max_length_q=None,
                **_) -> CausalLMOutput:
        """A packed row (cu_seq_lens_q) or padded rows (attention_mask, each row's tokens contiguous);
        logits in bf16 over the real vocabulary, shaped like input_ids."""
        if self.seen is not None and not self.seen:  # the bf16 weights this forward reads, as digests
            names, views = zip(*((n, _bf16(p)) for n, p in self.named_parameters()))
            self.seen.update(zip(names, digests(list(views))))
        b, length = input_ids.shape
        keep = None
        if cu_seq_lens_q is None:
            mask = torch.ones_like(input_ids, dtype=torch.bool) if attention_mask is None else attention_mask.bool()
            keep = mask.reshape(-1)
            lengths = mask.sum(-1)
            ids, pos = input_ids.reshape(-1)[keep], (mask.cumsum(-1) - 1).reshape(-1)[keep]
            cu, max_len = F.pad(lengths.cumsum(0), (1, 0)).to(torch.int32), int(lengths.max())
        else:
            ids, pos = input_ids.reshape(-1), position_ids.reshape(-1)
            cu, max_len = cu_seq_lens_q.to(torch.int32), int(max_length_q)
        logits = self._logits(ids, pos.long(), cu, max_len)
        if keep is not None:
            logits = logits.new_zeros(b * length, logits.shape[-1]).index_copy(0, keep.nonzero().squeeze(-1), logits)
        return CausalLMOutput(logits=logits.view(b, length, -1))

    def _logits(self, ids, pos, cu, max_len) -> torch.Tensor:
        c, m = self.config, self.model
        if self._cache is None or self._cache.device != ids.device:
            self._cache = rope_cache(self.head_dim, self.base, c.max_position_embeddings, ids.device, torch.bfloat16)
        h, residual = F.embedding(ids, _bf16(m.embed_tokens.weight)), None
        layout = paged_layout(cu, max_len, self.block_size)  # once: the layers read it without waiting on the device
        for layer in m.layers:
            args = (layer, h, residual, pos, layout)
            if self.checkpointing and torch.is_grad_enabled():
                h, residual = checkpoint(self._layer, *args, use_reentrant=False, context_fn=_recompute_natively)
            else:
                h, residual = self._layer(*args)
        h, _ = add_rms_norm(h, residual, _bf16(m.norm.weight), c.rms_norm_eps)
        head = _bf16(self.lm_head.weight)
        head = F.pad(head, (0, 0, 0, self.padded_vocab - head.shape[0]))
        return linear(h, head)[:, : c.vocab_size]  # vLLM's lm_head runs the same batch-invariant GEMM

    def _layer(self, layer, h, residual, pos, layout):
        eps, attn, mlp, d = self.config.rms_norm_eps, layer.self_attn, layer.mlp, self.head_dim
        w_in = _bf16(layer.input_layernorm.weight)
        if residual is None:
            residual, x = h, rms_norm(h, w_in, eps)
        else:
            x, residual = add_rms_norm(h, residual, w_in, eps)
        qkv_w = torch.cat([_bf16(attn.q_proj.weight), _bf16(attn.k_proj.weight), _bf16(attn.v_proj.weight)])
        qkv_b = torch.cat([_bf16(attn.q_proj.bias), _bf16(attn.k_proj.bias), _bf16(attn.v_proj.bias)])
        q, k, v = linear(x, qkv_w, qkv_b).split([self.heads * d, self.kv_heads * d, self.kv_heads * d], -1)
        q, k = rope(pos, q, k, self._cache, d)
        t = q.shape[0]
        o = paged_attention(q.view(t, self.heads, d), k.view(t, self.kv_heads, d), v.reshape(t, self.kv_heads, d),
                            layout, d ** -0.5)
        h = linear(o.reshape(t, -1), _bf16(attn.o_proj.weight))
        x, residual = add_rms_norm(h, residual, _bf16(layer.post_attention_layernorm.weight), eps)
        gate_up = linear(x, torch.cat([_bf16(mlp.gate_proj.weight), _bf16(mlp.up_proj.weight)]))
        return linear(silu_and_mul(gate_up), _bf16(mlp.down_proj.weight)), residual
