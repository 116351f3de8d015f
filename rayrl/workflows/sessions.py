"""Gateway sessions: the token record of one agent episode, kept token-exact across its turns.

A request whose messages extend what the session has seen (its earlier messages, then the assistant
messages it returned) is prompted with the recorded tokens plus the new messages' tokens only. Any
other history (the client edited it) starts the record again from a fresh tokenization, counted."""

from __future__ import annotations

import time

import msgspec

from rayrl.types import Sample
from rayrl.workflows.base import Sampling
from rayrl.workflows.chat import NotAContinuation, as_template_message, continuation_ids, normalize, prompt_ids
from rayrl.workflows.trajectory import TurnRecorder


class PlannedTurn(msgspec.Struct):
    """What the next generation is prompted with, and what committing it will record."""

    prompt_ids: list[int]
    appended: list[int]  # environment tokens between the last sampled turn and this prompt
    restart: bool  # the record starts again from these prompt ids


class SessionEnd(msgspec.Struct):
    """A closed session: its episode as one Sample (None if no turn was sampled), the reward the agent
    set (None if it set none), and how often its history had to be tokenized again."""

    sample: Sample | None
    reward: float | None
    retokenized: int


class Session:
    def __init__(self, sid: str, worker: int, sampling: Sampling, max_context: int) -> None:
        self.id, self.worker, self.sampling, self.max_context = sid, worker, sampling, max_context
        self.recorder: TurnRecorder | None = None
        self.seen: list[dict] = []  # normalized messages the record covers, the returned assistant turns included
        self.reward: float | None = None
        self.retokenized = 0
        self.turns = 0
        self.last_used = time.monotonic()

    def plan(self, tokenizer, messages: list, tools: list[dict] | None) -> PlannedTurn:
        self.last_used = time.monotonic()
        plain = [as_template_message(m) for m in messages]
        norm = [normalize(m) for m in messages]
        rec, k = self.recorder, len(self.seen)
        if rec is not None and len(norm) > k and norm[:k] == self.seen:
            try:
                ids = continuation_ids(tokenizer, plain[:k], plain[k:], tools, ended=rec.last.finish_reason == "stop")
                return PlannedTurn(rec.context() + ids, ids, False)
            except NotAContinuation:
                pass
        if rec is not None:
            self.retokenized += 1
        return PlannedTurn(prompt_ids(tokenizer, plain, tools), [], True)

    def commit(self, turn: PlannedTurn, messages: list, sample: Sample, assistant: dict) -> None:
        """Record a sampled turn and the assistant message the client was given."""
        if turn.restart:
            self.recorder = TurnRecorder(self.id, turn.prompt_ids)
        else:
            self.recorder.add_environment(turn.appended)
        self.recorder.add_turn(sample)
        self.seen = [normalize(m) for m in messages] + [normalize(assistant)]
        self.turns += 1
        self.last_used = time.monotonic()

    def end(self) -> SessionEnd:
        return SessionEnd(self.recorder.sample() if self.recorder else None, self.reward, self.retokenized)
