"""On a GPU: the FlashAttention-2 varlen path (packed rows and padded rows) gives the fp32 reference's
log-probs and gradients as closely as transformers' own bf16 SDPA path does; a mask that let packed
sequences see each other would be off by far more."""

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from rayrl.batching import collate
from rayrl.engines.learner.microbatch import microbatches
from rayrl.engines.learner.scoring import microbatch_logprobs, token_logprobs
from rayrl.models.policy import load_policy
from rayrl.models.varlen_attention import VARLEN
from rayrl.types import Sample, Task, TrajectoryGroup

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=300, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=64, initializer_range=0.1)
    out = tmp_path_factory.mktemp("varlen-model")
    Qwen2ForCausalLM(cfg).save_pretrained(out)
    return out


def _batch():
    gen = torch.Generator().manual_seed(1)
    samples = [Sample("0", torch.randint(3, 300, (p,), generator=gen).tolist(),
                      torch.randint(3, 300, (c,), generator=gen).tolist(), [0.0] * c, [0] * c, "length", reward=1.0)
               for p, c in ((4, 9), (30, 40), (2, 3), (64, 100), (11, 1))]
    batch = collate([TrajectoryGroup(Task("0", "", "0"), samples)], pad_id=0)
    batch.advantages = torch.zeros(len(samples))
    return batch


def _run(model_dir, attention: str, dtype, pack: bool, offsets: bool = True):
    """offsets=False: a packed row without its cu_seq_lens, so the kernel finds them from position_ids."""
    model = load_policy(model_dir, attention, 64)[0].to("cuda", dtype)
    batch = _batch()
    (mb,) = microbatches(batch, max_tokens=10_000, pack=pack)
    if offsets:
        logp = microbatch_logprobs(model, mb, 0.7, "cuda")
    else:
        logp = token_logprobs(model, mb.input_ids.cuda(), None, 0.7, mb.position_ids.cuda())
    mask = mb.loss_mask.cuda()
    weight = torch.cos(mb.position_ids.cuda() * 0.37)  # per token, the same in both layouts
    (logp * mask * weight).sum().backward()
    scores = logp[mask > 0].double().detach()
    return scores, {n: p.grad.double() for n, p in model.named_parameters()}


def _grad_error(grads, ref):
    """Relative error of the whole gradient, and the worst (error, name) among the large parameters
    (k_proj.bias has no true gradient: softmax ignores it, so its relative error is noise over noise)."""
    total = (sum((grads[n] - ref[n]).norm() ** 2 for n in ref) / sum(ref[n].norm() ** 2 for n in ref)).sqrt()
    worst = max((((grads[n] - ref[n]).norm() / ref[n].norm()).item(), n) for n in ref if not n.endswith("k_proj.bias"))
    return total.item(), worst


def test_varlen_matches_the_fp32_reference_as_closely_as_sdpa(model_dir):
    ref_scores, ref_grads = _run(model_dir, "eager", torch.float32, pack=False)
    sdpa_scores, sdpa_grads = _run(model_dir, "sdpa", torch.bfloat16, pack=False)
    sdpa_err = (sdpa_scores - ref_scores).abs().max().item()
    sdpa_total, sdpa_worst = _grad_error(sdpa_grads, ref_grads)
    for pack, offsets in ((True, True), (True, False), (False, True)):
        scores, grads = _run(model_dir, VARLEN, torch.bfloat16, pack, offsets)
        err = (scores - ref_scores).abs().max().item()
        total, worst = _grad_error(grads, ref_grads)
        print(f"pack={pack} offsets={offsets}: score err {err:.4f} (sdpa {sdpa_err:.4f}); grad err {total:.4f} (sdpa {sdpa_total:.4f}), "
              f"worst {worst} (sdpa {sdpa_worst})")
        assert err <= 2 * sdpa_err + 0.02, (pack, err, sdpa_err)
        assert total <= 2 * sdpa_total + 0.01, (pack, total, sdpa_total)
        assert worst[0] <= 2 * sdpa_worst[0] + 0.01, (pack, worst, sdpa_worst)
