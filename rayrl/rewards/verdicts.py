"""Parsers of a judge's verdict (chosen by reward.model.parser): the judge's sample in, a score out; a ValueError
makes the sample unparsable (a counted failure, never a guessed score)."""

from __future__ import annotations

import math
import re

from rayrl.types import Sample

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def yes_probability(verdict: Sample) -> float:
    """P(yes): a verdict starting with yes/y scores the probability of its first token, one starting with
    no/n one minus it (the two answers take nearly all the judge's mass)."""
    text = verdict.text.strip().lower()
    if not text or text[0] not in "yn" or not verdict.logprobs:
        raise ValueError(f"verdict {verdict.text[:40]!r} is neither yes nor no")
    p = math.exp(verdict.logprobs[0])
    return p if text[0] == "y" else 1.0 - p


def yes_or_no(verdict: Sample) -> float:
    """1 for a verdict starting with yes/y, 0 for no/n: a hard verdict. Under group-relative advantages a group
    of wrong answers then has equal rewards (no signal), where yes_probability's small differences between
    them would be scaled up to full advantages."""
    text = verdict.text.strip().lower()
    if not text or text[0] not in "yn":
        raise ValueError(f"verdict {verdict.text[:40]!r} is neither yes nor no")
    return 1.0 if text[0] == "y" else 0.0


def number_in_text(verdict: Sample, scale: float = 10.0) -> float:
    """The first number in the verdict ("Score: 7" or "7/10"), divided by scale and clipped to [0, 1]."""
    found = _NUMBER.search(verdict.text)
    if found is None:
        raise ValueError(f"verdict {verdict.text[:40]!r} holds no number")
    return min(1.0, max(0.0, float(found.group()) / scale))
