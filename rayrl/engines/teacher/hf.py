"""A teacher on plain torch: the log-prob of each completion token at the student's sampling temperature (so that
it compares with the student's own). On CPU a group's prompt runs once per row, its samples as branches (the
learner's shared-prompt layout); on a GPU, padded rows of prompt + completion. Frozen, never synced."""

from __future__ import annotations

import asyncio

import torch
from torch.nn.utils.rnn import pad_sequence

from rayrl.engines.learner.microbatch import microbatches, scatter
from rayrl.engines.learner.scoring import microbatch_logprobs
from rayrl.models.policy import load_policy
from rayrl.types import Batch, TokenScoreRequest


class HFTeacher:
    def __init__(self, model_path: str, temperature: float, on_gpu: bool, num_threads: int = 1,
                 max_batch_tokens: int = 16384) -> None:
        """max_batch_tokens: padded tokens per forward; a larger call runs as several."""
        torch.set_num_threads(max(1, num_threads))
        self.device = torch.device("cuda" if on_gpu else "cpu")
        model, self.tokenizer = load_policy(model_path, attn_implementation="sdpa")
        self.model = (model.to(torch.bfloat16) if on_gpu else model).to(self.device).eval()
        self.temperature, self.max_batch_tokens = temperature, max_batch_tokens

    async def score(self, requests: list[TokenScoreRequest]) -> list[list[float]]:
        """Each request's completion log-probs, in order; the forwards run in a thread (the actor keeps taking calls)."""
        return await asyncio.to_thread(self._score_all, requests)

    def _score_all(self, requests: list[TokenScoreRequest]) -> list[list[float]]:
        if self.device.type == "cpu":
            return self._score_shared(requests)
        out, chunk, longest = [], [], 0
        for r in requests:
            n = len(r.prompt_ids) + len(r.completion_ids)
            if chunk and max(longest, n) * (len(chunk) + 1) > self.max_batch_tokens:
                out += self._forward(chunk)
                chunk, longest = [], 0
            chunk.append(r)
            longest = max(longest, n)
        return out + (self._forward(chunk) if chunk else [])

    @torch.no_grad()
    def _forward(self, requests: list[TokenScoreRequest]) -> list[list[float]]:
        rows = [r.prompt_ids + r.completion_ids for r in requests]
        width = max(map(len, rows))
        ids = torch.zeros(len(rows), width, dtype=torch.long)
        attn = torch.zeros(len(rows), width, dtype=torch.long)
        for i, row in enumerate(rows):
            ids[i, :len(row)], attn[i, :len(row)] = torch.tensor(row), 1
        logits = self.model(input_ids=ids.to(self.device), attention_mask=attn.to(self.device)).logits.float()
        logp = torch.log_softmax(logits[:, :-1] / self.temperature, dim=-1)
        token = logp.gather(-1, ids[:, 1:].to(self.device).unsqueeze(-1)).squeeze(-1).cpu()  # [B, T-1]: token t+1
        return [token[i, len(r.prompt_ids) - 1: len(r.prompt_ids) - 1 + len(r.completion_ids)].tolist()
                for i, r in enumerate(requests)]

    @torch.inference_mode()
    def _score_shared(self, requests: list[TokenScoreRequest]) -> list[list[float]]:
        """Requests with the same prompt as one group, its prompt run once per row (on CPU, 32 prompts x 8 samples
        of up to 6 tokens: 0.03 s against 0.07 s for a row per sample)."""
        groups: dict[tuple[int, ...], int] = {}
        index = torch.tensor([groups.setdefault(tuple(r.prompt_ids), len(groups)) for r in requests])
        ids = pad_sequence([torch.tensor(r.prompt_ids + r.completion_ids) for r in requests], batch_first=True)
        starts = torch.tensor([len(r.prompt_ids) for r in requests])[:, None]
        sizes = [len(r.completion_ids) for r in requests]
        column = torch.arange(ids.shape[1])[None]
        ends = starts + torch.tensor(sizes)[:, None]
        targets = ((column >= starts) & (column < ends)).float()
        zeros = torch.zeros(ids.shape)
        batch = Batch(ids, (column < ends).long(), targets, zeros, torch.zeros_like(ids), zeros[:, 0], index)
        logp = torch.zeros(ids.shape)
        for mb in microbatches(batch, self.max_batch_tokens, pack=False, share_prompts=True):
            scatter(microbatch_logprobs(self.model, mb, self.temperature), mb, logp)
        return [part.tolist() for part in logp[targets > 0].split(sizes)]

    def shutdown(self) -> None:
        pass
