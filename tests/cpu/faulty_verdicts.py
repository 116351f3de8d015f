"""Judge verdict parsers that fail the ways judges do, for tests/cpu/test_reward_model_actors.py (imported by the
reward model actors by name from the working directory: `tests.cpu.faulty_verdicts:<fn>`)."""

from __future__ import annotations

import time

from rayrl.rewards.verdicts import yes_probability

_first = [True]  # per reward model process: its first call is slow


def slow_first_then_unparsable_sometimes(verdict):
    """The first verdict a (re)started judge parses takes 3 s (past the test's 1 s timeout: its whole engine call
    times out); after that, one verdict in 16, picked by its place in the engine call, does not parse."""
    if _first[0]:
        _first[0] = False
        time.sleep(3.0)
    if int(verdict.request_id.rsplit("-", 1)[1]) % 16 == 0:
        raise ValueError(f"verdict {verdict.text!r} does not follow the format")
    return yes_probability(verdict)


def every_other_unparsable(verdict):
    """Every other verdict of an engine call does not parse: with each group's samples asked together (combine=only),
    exactly half of every group is left unscored, so no group is ever complete."""
    if int(verdict.request_id.rsplit("-", 1)[1]) % 2 == 0:
        raise ValueError(f"verdict {verdict.text!r} does not follow the format")
    return yes_probability(verdict)


def always_no(verdict):
    """A judge that rejects every answer: every sample's reward is 0."""
    return 0.0
