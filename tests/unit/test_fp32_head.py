"""The fp32 lm_head: exact in fp32, closer to the true logits in bf16, correct gradients, names and ties kept."""

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from rayrl.models.fp32_head import Fp32Head, use_fp32_head


def _model() -> Qwen2ForCausalLM:
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True, initializer_range=0.5)
    return Qwen2ForCausalLM(cfg)


def test_swap_keeps_names_ties_and_fp32_results():
    model = _model()
    ids = torch.randint(0, 300, (3, 7))
    before = model(input_ids=ids).logits
    names = [n for n, _ in model.named_parameters()]
    use_fp32_head(model)
    assert isinstance(model.lm_head, Fp32Head)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert [n for n, _ in model.named_parameters()] == names and "lm_head.weight" in model.state_dict()
    assert torch.equal(model(input_ids=ids).logits, before)  # fp32 model: exactly nn.Linear


def test_bf16_logits_are_fp32_and_closer_to_exact():
    torch.manual_seed(1)
    hidden = (torch.randn(64, 64) * 4).bfloat16()
    weight = torch.randn(300, 64).bfloat16()
    exact = hidden.double() @ weight.double().t()
    head = Fp32Head(64, 300, bias=False).bfloat16()
    head.weight.data.copy_(weight)
    ours = head(hidden)
    plain = torch.nn.functional.linear(hidden, weight)
    assert ours.dtype == torch.float32 and plain.dtype == torch.bfloat16
    err_ours = (ours.double() - exact).abs().max().item()
    err_plain = (plain.double() - exact).abs().max().item()
    assert err_plain > 0.05 and err_ours < 1e-3, (err_ours, err_plain)


def test_bf16_gradients_match_the_fp32_reference():
    torch.manual_seed(2)
    hidden = torch.randn(2, 5, 64).bfloat16().requires_grad_()
    head = Fp32Head(64, 300, bias=False).bfloat16()
    upstream = torch.randn(2, 5, 300)
    (head(hidden) * upstream).sum().backward()
    h_ref = hidden.detach().float().requires_grad_()
    w_ref = head.weight.detach().float().requires_grad_()
    ((h_ref @ w_ref.t()) * upstream).sum().backward()
    assert hidden.grad.dtype == torch.bfloat16 and head.weight.grad.dtype == torch.bfloat16
    for ours, ref in ((hidden.grad, h_ref.grad), (head.weight.grad, w_ref.grad)):
        rel = ((ours.float() - ref).norm() / ref.norm()).item()
        assert rel < 1e-2, rel
