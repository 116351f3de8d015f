"""The token-scoring lm_head: the same log-probs and gradients as full log-softmax logits, in chunks."""

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from rayrl.engines.learner.scoring import token_logprobs
from rayrl.models.logprob_head import TokenLogprobHead, scoring, use_logprob_head


def _model() -> Qwen2ForCausalLM:
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True, initializer_range=0.5)
    return Qwen2ForCausalLM(cfg)


def _reference(model, ids, temperature):
    logits = model(input_ids=ids).logits[:, :-1].double()
    logp = torch.log_softmax(logits / temperature, -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    return torch.cat([torch.zeros_like(logp[:, :1]), logp], 1)


@pytest.mark.parametrize("chunk", [1, 5, 4096])
def test_chunked_scores_and_gradients_match_full_logits(chunk):
    model = _model().double()
    ids = torch.randint(0, 300, (3, 7))
    upstream = torch.randn(3, 7, dtype=torch.float64)
    (_reference(model, ids, 0.7) * upstream).sum().backward()
    ref_grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    ref = _reference(model, ids, 0.7).detach()
    model.zero_grad()
    use_logprob_head(model, chunk)
    ours = token_logprobs(model, ids, None, 0.7)
    assert ours.dtype == torch.float32
    assert (ours.double() - ref).abs().max() < 1e-5
    (ours.double() * upstream).sum().backward()
    for n, p in model.named_parameters():
        assert (p.grad - ref_grads[n]).abs().max() < 1e-5 * max(1.0, ref_grads[n].abs().max().item()), n


def test_outside_scoring_it_is_the_plain_lm_head_with_names_and_ties_kept():
    model = _model()
    ids = torch.randint(0, 300, (2, 5))
    before = model(input_ids=ids).logits
    names = [n for n, _ in model.named_parameters()]
    use_logprob_head(model, 4)
    assert isinstance(model.lm_head, TokenLogprobHead)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert [n for n, _ in model.named_parameters()] == names and "lm_head.weight" in model.state_dict()
    assert torch.equal(model(input_ids=ids).logits, before)
    with scoring(model.lm_head, torch.zeros_like(ids), 1.0):
        assert model(input_ids=ids).logits.shape == ids.shape
    assert model(input_ids=ids).logits.shape == (2, 5, 300)  # the context closed


def test_bf16_scores_use_fp32_logits():
    torch.manual_seed(1)
    head = TokenLogprobHead(64, 300, chunk=16).bfloat16()
    hidden = (torch.randn(40, 64) * 4).bfloat16()
    targets = torch.randint(0, 300, (40,))
    with scoring(head, targets, 1.0):
        ours = head(hidden)
    exact = torch.log_softmax(hidden.double() @ head.weight.double().t(), -1).gather(-1, targets[:, None])[:, 0]
    bf16_logits = torch.nn.functional.linear(hidden, head.weight)  # what a plain bf16 lm_head gives
    plain = torch.log_softmax(bf16_logits.float(), -1).gather(-1, targets[:, None])[:, 0]
    assert (ours.double() - exact).abs().max() < 1e-3 < (plain.double() - exact).abs().max()


def test_a_biased_lm_head_is_refused():
    model = _model()
    model.lm_head = torch.nn.Linear(64, 300, bias=True)
    with pytest.raises(ValueError, match="bias"):
        use_logprob_head(model, 8)


def test_one_chunk_keeps_its_logits_for_the_backward_with_the_same_gradients():
    torch.manual_seed(2)
    hidden = torch.randn(12, 64, dtype=torch.float64)
    targets = torch.randint(0, 300, (12,))
    upstream = torch.randn(12, 2, dtype=torch.float64)
    grads = []
    for chunk in (12, 5):  # 12: one chunk, logits kept; 5: three chunks, recomputed
        head = TokenLogprobHead(64, 300, chunk=chunk).double()
        torch.manual_seed(3)
        torch.nn.init.normal_(head.weight, std=0.2)
        h = hidden.clone().requires_grad_()
        with scoring(head, targets, 0.8, entropy=True):
            out = head(h)
        ctx = out.grad_fn.next_functions[0][0]  # the head returns a view of the function's output
        assert (getattr(ctx, "logits", None) is not None) == (chunk == 12)
        (out.double() * upstream).sum().backward()
        assert getattr(ctx, "logits", None) is None  # released once the backward used them
        grads.append((h.grad, head.weight.grad))
    for kept, chunked in zip(*grads):
        assert (kept - chunked).abs().max() < 1e-5 * max(1.0, chunked.abs().max().item())  # fp32 logits
