"""Token log-probs under a policy model: the one scoring path of learners, checks and exports."""

from __future__ import annotations

import torch

from rayrl.engines.learner.microbatch import MicroBatch, padded, segment_mask
from rayrl.models import bitwise_ops
from rayrl.models.logprob_head import TokenLogprobHead, scoring
from rayrl.models.shared_pictures import shared_pictures
from rayrl.types import Batch


def token_logprobs(model, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
                   temperature: float, position_ids: torch.Tensor | None = None, entropy: bool = False,
                   **attention_kwargs) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """[B, T]: entry t is log p(token t | tokens < t) at the sampling temperature; entry 0 is 0. With
    entropy, also [B, T] the entropy of the distribution token t was drawn from.

    Packed rows pass attention_mask=None, position_ids that restart per sequence and the varlen
    kernel's attention_kwargs. A TokenLogprobHead (learners) scores in fp32 chunks without full logits."""
    inputs = dict(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False,
                  **attention_kwargs)
    head = getattr(model, "module", model).get_output_embeddings()  # DeepSpeed engines wrap the model
    if isinstance(head, TokenLogprobHead):
        targets = torch.cat([input_ids[:, 1:], torch.zeros_like(input_ids[:, :1])], 1)
        with scoring(head, targets, temperature, entropy):
            out = model(**inputs).logits[:, :-1]
        logp, ent = (out[..., 0], out[..., 1]) if entropy else (out, None)
    else:
        logits = model(**inputs).logits[:, :-1]
        if getattr(model, "vllm_sampler_logprobs", False):  # the bitwise forward: vLLM's sampler kernels
            rows = bitwise_ops.sampler_logits(logits.flatten(0, 1), temperature, model.padded_vocab)
            logp = bitwise_ops.token_logprobs(rows, input_ids[:, 1:].flatten()).view(logits.shape[:2])
            all_logp = torch.log_softmax(rows.float(), -1).view(*logits.shape) if entropy else None
        else:  # on CUDA, dividing by a Python float multiplies by its reciprocal; vLLM divides by a tensor
            logits = logits.float()
            divisor = logits.new_tensor(temperature) if logits.is_cuda else temperature
            all_logp = torch.log_softmax(logits / divisor, -1)
            logp = all_logp.gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
        ent = -(all_logp.exp() * all_logp).sum(-1) if entropy else None
    pad = lambda t: torch.cat([torch.zeros_like(t[:, :1]), t], 1)  # noqa: E731
    return (pad(logp), pad(ent)) if entropy else pad(logp)


def microbatch_logprobs(model, mb: MicroBatch, temperature: float, device="cpu", entropy: bool = False):
    """Token log-probs of one micro-batch (packed, padded or shared prompts) on the model's device (and entropies)."""
    mask = None if mb.attention_mask is None else mb.attention_mask.to(device)
    if mb.segments is not None:  # shared prompts: each branch sees the prefix and itself
        mask = segment_mask(mb.segments.to(device), next(model.parameters()).dtype)
    with shared_pictures(model, mb.image_slots):
        return token_logprobs(model, mb.input_ids.to(device), mask, temperature, mb.model_positions(device), entropy,
                              **mb.attention_kwargs(device), **mb.image_kwargs(device))


def batch_logprobs(model, batch: Batch, temperature: float, device="cpu") -> torch.Tensor:
    """Token log-probs of a padded Batch, no gradients, back on the CPU."""
    if batch.rope_positions is not None:  # images: the padded micro-batch of every row carries them
        with torch.no_grad():
            return microbatch_logprobs(model, padded(batch, list(range(len(batch.input_ids)))), temperature,
                                       device).cpu()
    with torch.no_grad():
        return token_logprobs(model, batch.input_ids.to(device), batch.attention_mask.to(device), temperature).cpu()
