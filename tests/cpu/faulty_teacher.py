"""A teacher engine that fails the way a starting teacher does, for tests/cpu/test_distillation.py (teacher.engine by
import string: `tests.cpu.faulty_teacher:SlowFirstCalls`)."""

from __future__ import annotations

import time

from rayrl.engines.teacher.hf import HFTeacher


class SlowFirstCalls(HFTeacher):
    """The first two engine calls of each (re)started process take 3 s: past the test's 1 s teacher.timeout_s."""

    calls = 0

    def _score_all(self, requests):
        SlowFirstCalls.calls += 1
        if SlowFirstCalls.calls <= 2:
            time.sleep(3.0)
        return super()._score_all(requests)
