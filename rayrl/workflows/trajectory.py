"""One multi-turn episode as one Sample: the first prompt, then each sampled turn (trained) and each
stretch of tokens the environment appended (tool results, chat markup: in the context, out of the loss)."""

from __future__ import annotations

from rayrl.types import Sample


class TurnRecorder:
    def __init__(self, request_id: str, prompt_ids: list[int]) -> None:
        self.request_id, self.prompt_ids = request_id, list(prompt_ids)
        self.completion: list[int] = []
        self.mask: list[int] = []
        self.logprobs: list[float] = []
        self.versions: list[int] = []
        self.last: Sample | None = None
        self.turns = 0

    def context(self) -> list[int]:
        """What the next turn is prompted with: every token so far, exactly as sampled or appended."""
        return self.prompt_ids + self.completion

    def add_turn(self, sample: Sample) -> None:
        """A sampled turn; its prompt must be this episode's context (token-in, token-out)."""
        if sample.prompt_ids != self.context():
            raise ValueError(f"{self.request_id}: a turn was sampled from a prompt other than the episode's tokens")
        self.completion += sample.completion_ids
        self.mask += [1] * len(sample.completion_ids)
        self.logprobs += sample.logprobs
        self.versions += sample.versions
        self.last, self.turns = sample, self.turns + 1

    def add_environment(self, ids: list[int]) -> None:
        """Tokens the policy did not sample: masked out, tagged with the last turn's version."""
        version = self.versions[-1] if self.versions else 0
        self.completion += ids
        self.mask += [0] * len(ids)
        self.logprobs += [0.0] * len(ids)
        self.versions += [version] * len(ids)

    def sample(self) -> Sample:
        """The episode; text and finish_reason are the last turn's (what the reward judges)."""
        last = self.last
        return Sample(self.request_id, self.prompt_ids, self.completion, self.logprobs, self.versions,
                      last.finish_reason if last else "abort", last.text if last else "",
                      loss_mask=self.mask, turns=self.turns)
