"""A scoring model: a sequence-classification head (one label, Bradley-Terry style) over the template's text;
its logit is the score. Plain torch, frozen, one forward per call."""

from __future__ import annotations

import asyncio

import torch
from transformers import AutoModelForSequenceClassification

from rayrl.config import RewardModelConfig
from rayrl.engines.reward.base import render
from rayrl.models.tokenizer import load_tokenizer
from rayrl.types import ModelScore, ScoreRequest


class SequenceScorer:
    def __init__(self, model_path: str, section: RewardModelConfig, on_gpu: bool, num_threads: int = 1) -> None:
        torch.set_num_threads(max(1, num_threads))
        self.section = section
        self.device = torch.device("cuda" if on_gpu else "cpu")
        dtype = torch.bfloat16 if on_gpu else torch.float32
        self.model = AutoModelForSequenceClassification.from_pretrained(model_path, dtype=dtype).to(self.device).eval()
        if self.model.config.num_labels != 1:
            raise ValueError(f"reward.model.kind=scorer needs a one-label sequence-classification model; "
                             f"{model_path} has {self.model.config.num_labels} labels")
        self.tokenizer = load_tokenizer(model_path)
        self.engine_calls = 0

    async def score(self, requests: list[ScoreRequest]) -> list[ModelScore]:
        """One forward in a thread (the actor's event loop keeps taking calls meanwhile)."""
        return await asyncio.to_thread(self._forward, requests)

    @torch.no_grad()
    def _forward(self, requests: list[ScoreRequest]) -> list[ModelScore]:
        texts = [render(self.section.template, r) for r in requests]
        bos = self.tokenizer.bos_token or ""
        enc = self.tokenizer([bos + t for t in texts], return_tensors="pt", padding=True, add_special_tokens=False)
        self.engine_calls += 1
        logits = self.model(**{k: v.to(self.device) for k, v in enc.items()}).logits[:, 0].float().cpu()
        return [ModelScore(float(x)) for x in logits]

    def shutdown(self) -> None:
        pass
