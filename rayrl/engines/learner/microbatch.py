"""Cut a Batch into micro-batches under a token budget: padding-free packed rows or padded rows.

Packed: sequences are concatenated into one row; position_ids restart at 0 for each sequence and
cu_seqlens marks where each starts, for the varlen attention kernel (on CPU transformers turns the
position_ids into a block-diagonal causal mask). Every per-token tensor is carried along, so the
loss is computed the same way in both layouts; seq_ids (the batch row of each token) and position_ids
map any further [B, T] tensor into a micro-batch (`view`) and back (`scatter`).
"""

from __future__ import annotations

import msgspec
import torch

from rayrl.types import Batch


class MicroBatch(msgspec.Struct):
    input_ids: torch.Tensor  # [R, L]
    position_ids: torch.Tensor  # [R, L]
    attention_mask: torch.Tensor | None  # [R, L] for padded rows, None when packed
    loss_mask: torch.Tensor  # [R, L] float
    behav_logprobs: torch.Tensor
    prox_logprobs: torch.Tensor | None
    ref_logprobs: torch.Tensor | None
    advantages: torch.Tensor | None  # [R, L], filled by the learner once the batch's advantages are known
    seq_ids: torch.Tensor  # [R, L] long: the batch row each token belongs to; -1 on padding
    weights: torch.Tensor | None = None  # [R, L]: each token's aggregation weight (algorithm.loss_agg)
    values: torch.Tensor | None = None  # [R, L]: the critic's values at sampling time (ppo)
    cu_seqlens: torch.Tensor | None = None  # packed: int32 [n_seqs + 1] offsets of the sequences in the row
    max_seqlen: int = 0  # packed: the longest sequence in the row
    versions: torch.Tensor | None = None  # [R, L]: the policy version that sampled each target token

    def to(self, device) -> "MicroBatch":
        """Every tensor on device, copied once before the step's passes: a copy from pageable host memory
        waits for the device's queue, so copies between passes would stall it every micro-batch."""
        if device == "cpu" or getattr(device, "type", device) == "cpu":
            return self
        values = {f: getattr(self, f) for f in self.__struct_fields__}
        return MicroBatch(**{f: v.to(device) if isinstance(v, torch.Tensor) else v for f, v in values.items()})

    def attention_kwargs(self, device) -> dict:
        """transformers' flash-attention kwargs of a packed row; none for padded rows."""
        if self.cu_seqlens is None:
            return {}
        cu = self.cu_seqlens.to(device)
        return {"cu_seq_lens_q": cu, "cu_seq_lens_k": cu, "max_length_q": self.max_seqlen,
                "max_length_k": self.max_seqlen}

    @property
    def n_tokens(self) -> int:
        return int(self.input_ids.numel())

    @property
    def n_sequences(self) -> int:
        """Sequences with at least one scored token (a lockstep filler has none)."""
        if self.cu_seqlens is None:
            return int((self.loss_mask.sum(-1) > 0).sum())
        cu = self.cu_seqlens.long()
        seq = torch.repeat_interleave(torch.arange(len(cu) - 1), cu.diff())
        scored = torch.zeros(len(cu) - 1).index_add_(0, seq, self.loss_mask[0].float())
        return int((scored > 0).sum())


def sequence_lengths(batch: Batch) -> list[int]:
    return batch.attention_mask.sum(-1).tolist()


def plan_microbatches(lengths: list[int], max_tokens: int) -> list[list[int]]:
    """First-fit decreasing: sequence indices per micro-batch, each summing to <= max_tokens."""
    if lengths and max(lengths) > max_tokens:
        raise ValueError(f"a sequence of {max(lengths)} tokens exceeds learner.max_tokens_per_micro_batch="
                         f"{max_tokens}; raise it to at least the longest prompt + max_new_tokens")
    bins: list[list[int]] = []
    loads: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        for b, load in enumerate(loads):
            if load + lengths[i] <= max_tokens:
                bins[b].append(i)
                loads[b] += lengths[i]
                break
        else:
            bins.append([i])
            loads.append(lengths[i])
    return [sorted(b) for b in bins]


PADDING_SHARE = 0.15  # a padded micro-batch is cut where padding would pass this share of its tokens


def plan_padded(lengths: list[int], max_tokens: int) -> list[list[int]]:
    """Longest first: sequence indices per padded micro-batch, each of at most max_tokens padded tokens and at
    most PADDING_SHARE padding, so rows of similar length share one (measured on CPU: a step on 256 short
    sequences took 0.135 s against 0.154 s on one micro-batch padded to the longest, median of 3 alternated)."""
    if lengths and max(lengths) > max_tokens:
        plan_microbatches(lengths, max_tokens)  # raises, naming the setting
    bins: list[list[int]] = []
    real = 0  # the last micro-batch's tokens without padding
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        if bins:
            rows, width = len(bins[-1]) + 1, lengths[bins[-1][0]]
            if rows * width <= max_tokens and real + lengths[i] >= (1 - PADDING_SHARE) * rows * width:
                bins[-1].append(i)
                real += lengths[i]
                continue
        bins.append([i])
        real = lengths[i]
    return [sorted(b) for b in bins]


def _per_token(batch: Batch) -> dict[str, torch.Tensor | None]:
    rows = torch.arange(batch.input_ids.shape[0]).unsqueeze(1).expand_as(batch.input_ids)
    return {"loss_mask": batch.loss_mask, "behav_logprobs": batch.behav_logprobs,
            "prox_logprobs": batch.prox_logprobs, "ref_logprobs": batch.ref_logprobs, "advantages": batch.advantages,
            "versions": batch.versions, "seq_ids": torch.where(batch.attention_mask > 0, rows, -1)}


def view(values: torch.Tensor, mb: MicroBatch) -> torch.Tensor:
    """A [B, T] batch tensor laid out as the micro-batch's [R, L] tokens (0 on padding)."""
    valid = mb.seq_ids >= 0
    return values[mb.seq_ids.clamp(min=0), mb.position_ids] * valid


def scatter(values: torch.Tensor, mb: MicroBatch, out: torch.Tensor) -> None:
    """The reverse of view: the micro-batch's [R, L] tokens written into their places in out [B, T]."""
    valid = mb.seq_ids >= 0
    out[mb.seq_ids[valid], mb.position_ids[valid]] = values[valid].to(out.dtype)


def packed(batch: Batch, rows: list[int]) -> MicroBatch:
    lengths = sequence_lengths(batch)
    pieces = {k: (None if v is None else torch.cat([v[i, : lengths[i]] for i in rows]).unsqueeze(0))
              for k, v in _per_token(batch).items()}
    ids = torch.cat([batch.input_ids[i, : lengths[i]] for i in rows]).unsqueeze(0)
    pos = torch.cat([torch.arange(lengths[i]) for i in rows]).unsqueeze(0)
    sizes = torch.tensor([lengths[i] for i in rows])
    cu = torch.nn.functional.pad(sizes.cumsum(0), (1, 0)).to(torch.int32)
    return MicroBatch(ids, pos, None, **pieces, cu_seqlens=cu, max_seqlen=int(sizes.max()))


def padded(batch: Batch, rows: list[int]) -> MicroBatch:
    width = max(sequence_lengths(batch)[i] for i in rows)
    index = torch.tensor(rows)
    pieces = {k: (None if v is None else v[index, :width]) for k, v in _per_token(batch).items()}
    attn = batch.attention_mask[index, :width]
    pos = (attn.cumsum(-1) - 1).clamp(min=0)
    return MicroBatch(batch.input_ids[index, :width], pos, attn, **pieces)


def microbatches(batch: Batch, max_tokens: int, pack: bool = True) -> list[MicroBatch]:
    plan = (plan_microbatches if pack else plan_padded)(sequence_lengths(batch), max_tokens)
    return [(packed if pack else padded)(batch, rows) for rows in plan]


def empty_like(mb: MicroBatch) -> MicroBatch:
    """A one-token micro-batch with zero loss weight, belonging to no sequence: keeps ranks in lockstep
    when one has fewer."""
    one = lambda t: None if t is None else torch.zeros_like(t[:, :1])  # noqa: E731
    packed_row = mb.cu_seqlens is not None
    return MicroBatch(mb.input_ids[:, :1], torch.zeros_like(mb.position_ids[:, :1]),
                      None if mb.attention_mask is None else mb.attention_mask[:, :1],
                      one(mb.loss_mask), one(mb.behav_logprobs), one(mb.prox_logprobs), one(mb.ref_logprobs),
                      one(mb.advantages), torch.full_like(mb.seq_ids[:, :1], -1), one(mb.weights), one(mb.values),
                      torch.tensor([0, 1], dtype=torch.int32) if packed_row else None, int(packed_row),
                      one(mb.versions))
