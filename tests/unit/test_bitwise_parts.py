"""The bitwise on-policy mode's CPU-checkable parts: the paged layout the learner's attention reads, the
rotary backward, the learner's Qwen2 wiring (vLLM's CUDA kernels stood in for by PyTorch references, since
they do not run here) against transformers' own forward, and the config's refusals. The equality itself is a
GPU test (tests/gpu/test_bitwise_gpu.py)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from transformers import Qwen2Config, Qwen2ForCausalLM

import rayrl.models.bitwise_ops as bitwise_ops
import rayrl.models.bitwise_qwen2 as bq
from rayrl.config import ConfigError, load_config
from rayrl.models.bitwise_ops import linear as bitwise_linear
from rayrl.models.bitwise_ops import paged_layout, rms_norm_native, rope_cache, rope_native, silu_and_mul_native


def test_paged_layout_reads_back_every_sequence():
    lengths = torch.tensor([1, 16, 17, 40, 3])
    cu = F.pad(lengths.cumsum(0), (1, 0)).to(torch.int32)
    layout = paged_layout(cu, int(lengths.max()), 16)
    slots, table = layout.slots, layout.table
    k = torch.randn(int(cu[-1]), 2, 4)
    cache = k.new_zeros(layout.n_pages * 16, 2, 4)
    cache[slots] = k
    pages = cache.view(-1, 16, 2, 4)
    assert len(set(slots.tolist())) == len(slots)  # no token overwrites another
    for s, n in enumerate(lengths.tolist()):
        read = pages[table[s, : -(-n // 16)].long()].reshape(-1, 2, 4)[:n]
        assert torch.equal(read, k[cu[s]: cu[s + 1]])


def test_rope_backward_is_the_inverse_rotation():
    cache = rope_cache(8, 10000.0, 64, "cpu", torch.float32)
    pos = torch.randint(0, 64, (5,))
    cos, sin = cache[pos].unsqueeze(1).chunk(2, -1)
    x = torch.randn(5, 3, 8, requires_grad=True)
    g = torch.randn(5, 3, 8)
    (auto,) = torch.autograd.grad((rope_native(x, cos, sin) * g).sum(), x)
    assert torch.allclose(rope_native(g, cos, -sin), auto, atol=1e-6)


def _natives(monkeypatch):
    """PyTorch references in place of vLLM's CUDA / Triton kernels (same math, not the same bits)."""
    def rope(pos, q, k, cache, d):
        cos, sin = cache[pos].float().unsqueeze(1).chunk(2, -1)
        out = [rope_native(t.float().view(t.shape[0], -1, d), cos, sin).reshape(t.shape).to(t.dtype) for t in (q, k)]
        return out[0], out[1]

    def attention(q, k, v, layout, scale):
        outs = []
        for a, b in zip(layout.cu[:-1].tolist(), layout.cu[1:].tolist()):
            qs, ks, vs = (t[a:b].transpose(0, 1).float() for t in (q, k, v))
            outs.append(F.scaled_dot_product_attention(qs, ks, vs, is_causal=True, scale=scale,
                                                       enable_gqa=True).transpose(0, 1))
        return torch.cat(outs).to(q.dtype)

    norm = lambda x, w, eps: rms_norm_native(x.float(), w.float(), eps).to(x.dtype)  # noqa: E731
    monkeypatch.setattr(bq, "rms_norm", norm)
    monkeypatch.setattr(bq, "add_rms_norm", lambda x, r, w, eps: (norm(x + r, w, eps), x + r))
    monkeypatch.setattr(bq, "rope", rope)
    monkeypatch.setattr(bq, "silu_and_mul", lambda x: silu_and_mul_native(x.float()).to(x.dtype))
    monkeypatch.setattr(bq, "paged_attention", attention)
    monkeypatch.setattr(bq, "linear", lambda x, w, b=None: F.linear(x, w) + (0 if b is None else b))


def _tiny_qwen2() -> Qwen2ForCausalLM:
    config = Qwen2Config(vocab_size=100, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=128,
                         tie_word_embeddings=True, initializer_range=0.2)
    return Qwen2ForCausalLM(config).to(torch.bfloat16)


def test_learner_forward_is_wired_like_qwen2(monkeypatch):
    _natives(monkeypatch)
    torch.manual_seed(0)
    hf = _tiny_qwen2().eval()
    model = bq.BitwiseQwen2(hf, block_size=16)
    assert model.padded_vocab == 128
    lengths = [5, 19, 1]
    ids = torch.randint(0, 100, (sum(lengths),))
    pos = torch.cat([torch.arange(n) for n in lengths])
    cu = F.pad(torch.tensor(lengths).cumsum(0), (1, 0))
    layouts = []  # built once per forward, not once per layer (each build reads the sequence lengths on the host)
    monkeypatch.setattr(bq, "paged_layout", lambda *a: layouts.append(a) or bitwise_ops.paged_layout(*a))
    with torch.no_grad():
        packed = model(ids[None], position_ids=pos[None], cu_seq_lens_q=cu, max_length_q=max(lengths)).logits[0]
    assert len(layouts) == 1 and len(hf.model.layers) == 2
    with torch.no_grad():
        for a, b in zip(cu[:-1].tolist(), cu[1:].tolist()):
            want = hf(ids[None, a:b]).logits[0].float()
            assert (packed[a:b].float() - want).abs().max() < 0.05 * want.abs().max()
        # padded rows (left padding, as batches are laid out) give the packed row's logits
        rows = torch.zeros(3, 19, dtype=torch.long)
        mask = torch.zeros(3, 19, dtype=torch.long)
        for i, (a, b) in enumerate(zip(cu[:-1].tolist(), cu[1:].tolist())):
            rows[i, 19 - (b - a):], mask[i, 19 - (b - a):] = ids[a:b], 1
        padded = model(rows, attention_mask=mask).logits
        assert torch.equal(padded[mask.bool()], packed)
    # gradients reach every parameter, named as transformers names them
    model.gradient_checkpointing_enable()
    model(ids[None], position_ids=pos[None], cu_seq_lens_q=cu, max_length_q=19).logits.float().logsumexp(-1).sum().backward()
    names = {n for n, p in model.named_parameters() if p.grad is not None and p.grad.abs().sum() > 0}
    assert names == {n for n, _ in hf.named_parameters()}


def test_linear_runs_vllms_linear_and_has_the_gradients_of_f_linear(monkeypatch):
    # vLLM's batch-invariant linear adds the bias to the bf16 product; its GEMM needs CUDA, so it is stood in for
    import vllm.model_executor.layers.batch_invariant as vbi

    calls = []

    def vllm_linear(x, w, b=None):
        calls.append(b is not None)
        out = (x.float() @ w.float().t()).to(x.dtype)
        return out if b is None else out + b

    monkeypatch.setattr(vbi, "linear_batch_invariant", vllm_linear)
    torch.manual_seed(0)
    x, w, b = (torch.randn(*s, dtype=torch.bfloat16, requires_grad=True) for s in ((7, 16), (5, 16), (5,)))
    g = torch.randn(7, 5, dtype=torch.bfloat16)
    out = bitwise_linear(x, w, b)
    assert calls == [True] and torch.equal(out, vllm_linear(x.detach(), w.detach(), b.detach()))
    got = torch.autograd.grad(out, (x, w, b), g)
    want = torch.autograd.grad(F.linear(x.float(), w.float(), b.float()), (x, w, b), g.float())
    for a, e in zip(got, want):
        assert a.dtype == torch.bfloat16 and torch.allclose(a.float(), e.float(), rtol=0.02, atol=0.05)
    assert bitwise_linear(x, w).shape == (7, 5) and calls == [True, True, False]  # the check above called it too


def test_checkpoint_recompute_runs_native_kernels_with_the_same_gradients(monkeypatch):
    # the forward runs vLLM's batch-invariant linear and norm (stood in for, counting calls); the activation
    # checkpoint's recompute runs PyTorch's and must give the gradients of a forward without checkpointing
    import vllm.model_executor.layers.batch_invariant as vbi

    calls = []

    def vllm_linear(x, w, b=None):
        calls.append("linear")
        out = (x.float() @ w.float().t()).to(x.dtype)
        return out if b is None else out + b

    def vllm_norm(x, w, eps):
        calls.append("norm")
        return rms_norm_native(x.float(), w.float(), eps).to(x.dtype)

    _natives(monkeypatch)
    for name in ("linear", "rms_norm", "add_rms_norm"):  # the real ops of the mode, over the stand-in kernels
        monkeypatch.setattr(bq, name, getattr(bitwise_ops, name))
    monkeypatch.setattr(vbi, "linear_batch_invariant", vllm_linear)
    monkeypatch.setattr(vbi, "rms_norm_batch_invariant", vllm_norm)
    torch.manual_seed(0)
    model = bq.BitwiseQwen2(_tiny_qwen2(), block_size=16)
    ids, lengths = torch.randint(0, 100, (1, 24)), [10, 14]
    pos = torch.cat([torch.arange(n) for n in lengths])[None]
    cu = F.pad(torch.tensor(lengths).cumsum(0), (1, 0))
    grads = []
    for checkpointing in (False, True):
        model.checkpointing = checkpointing
        model.zero_grad()
        calls.clear()
        logits = model(ids, position_ids=pos, cu_seq_lens_q=cu, max_length_q=14).logits
        forward = len(calls)
        logits.float().logsumexp(-1).sum().backward()
        assert len(calls) == forward  # no vLLM kernel ran in the backward, recompute included
        grads.append({n: p.grad.float() for n, p in model.named_parameters()})
    assert forward == 2 * (4 + 2) + 2  # per layer 4 linears and 2 norms; the final norm and the lm_head
    for n, g in grads[0].items():
        assert (grads[1][n] - g).abs().max() <= 0.02 * max(1.0, g.abs().max().item()), n


def test_scoring_runs_vllms_sampler_kernels_on_the_logits_as_vllm_holds_them(monkeypatch):
    # vLLM's sampler kernels are Triton (CUDA only): stood in for by references that record what they were given.
    # At temperature 1 vLLM scores its lm_head's rows in place (row stride: the padded vocabulary); otherwise an
    # fp32 copy its temperature kernel divided. The gradient stays log_softmax's.
    import vllm.v1.worker.gpu.sample.gumbel as vgumbel
    import vllm.v1.worker.gpu.sample.logprob as vlp

    from rayrl.engines.learner.scoring import token_logprobs

    calls, divisions = [], []

    def kernel(logits, token_ids):
        calls.append((tuple(token_ids.shape), logits.stride(), logits.dtype))
        return torch.log_softmax(logits.float(), -1).gather(-1, token_ids)

    def temperature_kernel(logits, rows, temperature):  # in place, one temperature per request row
        divisions.append((tuple(logits.shape), logits.is_contiguous(), rows.tolist(), temperature.tolist()))
        logits.div_(temperature[rows.long()][:, None])

    monkeypatch.setattr(vlp, "compute_token_logprobs", kernel)
    monkeypatch.setattr(vgumbel, "apply_temperature", temperature_kernel)

    class Model(torch.nn.Module):
        vllm_sampler_logprobs, padded_vocab = True, 16

        def __init__(self):
            super().__init__()
            self.head = torch.nn.Linear(4, 11)

        def get_output_embeddings(self):
            return self.head

        def forward(self, input_ids, **_):
            return type("Out", (), {"logits": self.head(torch.ones(*input_ids.shape, 4) * input_ids[..., None])})

    torch.manual_seed(0)
    model, ids = Model(), torch.randint(0, 11, (2, 5))
    wanted = {}
    for t in (0.7, 1.0):
        logp = token_logprobs(model, ids, None, temperature=t)
        assert logp.shape == (2, 5) and torch.all(logp[:, 0] == 0)
        want = torch.log_softmax(model(ids).logits[:, :-1].float() / t, -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
        assert torch.equal(logp[:, 1:], want), t
        wanted[t] = want
        got = torch.autograd.grad(logp.sum(), model.head.weight)[0]
        assert torch.allclose(got, torch.autograd.grad(want.sum(), model.head.weight)[0], atol=1e-6), t
    assert divisions == [((8, 11), True, [0] * 8, [pytest.approx(0.7)])]  # none at temperature 1
    assert calls == [((8, 1), (11, 1), torch.float32), ((8, 1), (16, 1), torch.float32)]
    logp, ent = token_logprobs(model, ids, None, temperature=0.7, entropy=True)  # the entropy bonus: full softmax
    assert len(calls) == 3 and torch.equal(logp[:, 1:], wanted[0.7]) and ent.shape == (2, 5)


def test_config_names_what_bitwise_mode_needs():
    with pytest.raises(ConfigError, match="verified for one learner rank.*learner.num_workers=1"):
        load_config(None, ["rollout.bitwise_on_policy=true", "rollout.engine=vllm", "cluster.n_gpus_per_node=1",
                           "vllm.dtype=bfloat16", "learner.dtype=bfloat16", "learner.num_workers=2",
                           "learner.backend=fsdp"])
    cfg = load_config(None, ["rollout.bitwise_on_policy=true", "rollout.engine=vllm", "cluster.n_gpus_per_node=1",
                             "vllm.dtype=bfloat16", "learner.dtype=bfloat16", "learner.backend=fsdp"])
    assert cfg.vllm.kv_block_size == 16
