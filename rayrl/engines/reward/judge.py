"""A generative judge: each sample shown through the template to a rollout engine (hf or vLLM), its verdicts
(reward.model.votes of them) parsed into a score by reward.model.parser and averaged."""

from __future__ import annotations

import math

from rayrl.config import RewardModelConfig
from rayrl.engines.reward.base import render
from rayrl.imports import load_object
from rayrl.types import GenerationRequest, ModelScore, ScoreRequest


class Judge:
    def __init__(self, section: RewardModelConfig, engine, tokenizer, search_path: list[str] | None = None) -> None:
        """engine: a rollout engine holding the judge's frozen weights (it never joins a weight sync)."""
        self.section, self.engine, self.tokenizer = section, engine, tokenizer
        self.parse = load_object(section.parser, "reward.model.parser", search_path, "function")
        self.engine_calls = 0

    def encode(self, request: ScoreRequest) -> list[int]:
        text = render(self.section.template, request)
        if self.section.chat_template:
            return list(self.tokenizer.apply_chat_template([{"role": "user", "content": text}],
                                                           add_generation_prompt=True, tokenize=True))
        bos = [self.tokenizer.bos_token_id] if self.tokenizer.bos_token_id is not None else []
        return [*bos, *self.tokenizer.encode(text, add_special_tokens=False)]

    async def score(self, requests: list[ScoreRequest]) -> list[ModelScore]:
        """One engine call for every request's votes."""
        m = self.section
        calls = [GenerationRequest(f"judge-{i}", self.encode(r), m.votes, m.max_new_tokens, m.temperature, seed=i)
                 for i, r in enumerate(requests)]
        self.engine_calls += 1
        votes: dict[str, list] = {c.request_id: [] for c in calls}
        for sample in await self.engine.generate(calls):
            votes[sample.request_id].append(sample)
        return [self._verdict(votes[c.request_id]) for c in calls]

    def _verdict(self, votes: list) -> ModelScore:
        """The mean of the votes that parse; none parsing (or a non-finite score) is an unparsable sample."""
        scores, errors = [], []
        for vote in votes:
            try:
                value = float(self.parse(vote))
            except (ValueError, TypeError) as err:
                errors.append(str(err))
                continue
            if not math.isfinite(value):
                errors.append(f"the parser returned {value}")
                continue
            scores.append(value)
        if not scores:
            return ModelScore(None, f"unparsable: {errors[0] if errors else 'no verdict'}", "unparsable")
        return ModelScore(sum(scores) / len(scores))

    def shutdown(self) -> None:
        self.engine.shutdown()
