"""A teacher on plain torch: one forward over a padded batch of prompt + completion rows, the log-prob of each
completion token at the student's sampling temperature (so that it compares with the student's own). Frozen,
never synced."""

from __future__ import annotations

import asyncio

import torch

from rayrl.models.policy import load_policy
from rayrl.types import TokenScoreRequest


class HFTeacher:
    def __init__(self, model_path: str, temperature: float, on_gpu: bool, num_threads: int = 1,
                 max_batch_tokens: int = 16384) -> None:
        """max_batch_tokens: padded tokens per forward; a larger call runs as several."""
        torch.set_num_threads(max(1, num_threads))
        self.device = torch.device("cuda" if on_gpu else "cpu")
        model, self.tokenizer = load_policy(model_path, attn_implementation="sdpa" if on_gpu else "eager")
        self.model = (model.to(torch.bfloat16) if on_gpu else model).to(self.device).eval()
        self.temperature, self.max_batch_tokens = temperature, max_batch_tokens

    async def score(self, requests: list[TokenScoreRequest]) -> list[list[float]]:
        """Each request's completion log-probs, in order; the forwards run in a thread (the actor keeps taking calls)."""
        return await asyncio.to_thread(self._score_all, requests)

    def _score_all(self, requests: list[TokenScoreRequest]) -> list[list[float]]:
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

    def shutdown(self) -> None:
        pass
