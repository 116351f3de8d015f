"""Score a trajectory group with a reward function, each call under its own deadline.

Every call runs on a thread of its own, at most max_threads at once; threads are reused once their call
returns. A call still running timeout_s after it started is abandoned: its slot goes to the next call and
its thread is left to finish or hang (Python cannot kill a thread; a new one takes its place), so a hung
function never starves the calls after it. A raise, a timeout, a non-finite value or a value of the wrong
type becomes reward 0 with a counted reason: never a crash, never a drop.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import Counter, deque

from rayrl.rewards.combine import MODEL_FAILURES, UNDECIDED
from rayrl.rewards.registry import RewardFn, RewardRejected, as_result
from rayrl.rewards.teacher_scores import TEACHER_FAILURES
from rayrl.types import TrajectoryGroup

# a sample's reward_status when it has no usable reward ("ok", or UNDECIDED for a reward model to settle)
FAILURES = ("error", "timeout", "non_finite", "wrong_type", *MODEL_FAILURES, *TEACHER_FAILURES)
EXAMPLES_PER_REASON = 5


class _Threads:
    """Daemon threads that run reward calls one after another; a call finds an idle one or a new one is started
    (a hung call keeps its thread, so every call starts at once). Starting a thread per call cost more than
    a rule reward itself."""

    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.idle, self.lock = 0, threading.Lock()

    def run(self, job) -> None:
        with self.lock:
            start = self.idle == 0
            self.idle -= 0 if start else 1
        if start:
            threading.Thread(target=self._loop, daemon=True, name="reward-call").start()
        self.jobs.put(job)

    def _loop(self) -> None:
        while True:
            self.jobs.get()()
            with self.lock:
                self.idle += 1


class _Call:
    """One reward call on a thread of its own; its slot is given back exactly once (done or abandoned)."""

    def __init__(self, fn: RewardFn, sample, task, slots: threading.Semaphore, undecided_ok: bool,
                 threads: _Threads) -> None:
        self.done, self.lock, self.slots, self.released = threading.Event(), threading.Lock(), slots, False
        self.undecided_ok = undecided_ok
        self.result, self.error = None, None
        self.started = time.monotonic()
        threads.run(lambda: self._run(fn, sample, task))

    def _run(self, fn, sample, task) -> None:
        try:
            value = fn(sample, task)
            self.result = None if value is None and self.undecided_ok else as_result(value)
        except Exception as err:  # noqa: BLE001 - any failure of user code becomes a counted zero
            self.error = err
        self.release()
        self.done.set()

    def release(self) -> bool:
        """Give the slot back; False if it was given back already."""
        with self.lock:
            if self.released:
                return False
            self.released = True
        self.slots.release()
        return True


class GroupScorer:
    def __init__(self, fn: RewardFn, timeout_s: float, max_threads: int, window: int = 256,
                 undecided_ok: bool = False) -> None:
        """undecided_ok: None from fn means "the rule cannot decide" (a reward model settles it), not wrong_type."""
        self.fn, self.timeout_s, self.undecided_ok = fn, timeout_s, undecided_ok
        self.slots, self.threads = threading.Semaphore(max_threads), _Threads()
        self.counts: Counter[str] = Counter()  # "ok" and each failure reason
        self.examples: dict[str, list[str]] = {}  # the first messages of each failure reason
        self.recent: deque[bool] = deque(maxlen=window)  # the last samples: failed or not
        self.abandoned = 0  # calls left running past their deadline
        self.first_failure: float | None = None  # time.time() of the first failed sample ever
        self.streak_start: float | None = None  # time.time() of the first failure since the last success
        self.lock = threading.Lock()  # score() may run in several threads at once (a threaded reward actor)

    def _expire(self, call: _Call) -> None:
        if not call.done.is_set() and time.monotonic() - call.started >= self.timeout_s and call.release():
            with self.lock:
                self.abandoned += 1

    def _start(self, sample, task, running: list[_Call]) -> _Call:
        while not self.slots.acquire(timeout=0.05):  # while waiting for a slot, free those past their deadline
            for call in running:
                self._expire(call)
        return _Call(self.fn, sample, task, self.slots, self.undecided_ok, self.threads)

    def score(self, group: TrajectoryGroup, count: bool = True) -> TrajectoryGroup:
        """Every sample's reward, status and reason; counted unless count=False (the caller records the final
        statuses once a reward model has had its say)."""
        calls: list[_Call] = []
        for sample in group.samples:
            calls.append(self._start(sample, group.task, calls))
        for sample, call in zip(group.samples, calls):
            finished = call.done.wait(max(0.0, call.started + self.timeout_s - time.monotonic()))
            if not finished:
                self._expire(call)
                status, reason, reward = "timeout", f"reward function took longer than {self.timeout_s}s", 0.0
            elif call.error is None and call.result is None:
                status, reason, reward = UNDECIDED, "the rule could not decide", 0.0
            elif call.error is not None:
                status = call.error.reason if isinstance(call.error, RewardRejected) else "error"
                reason = str(call.error) if status != "error" else f"{type(call.error).__name__}: {call.error}"
                reward = 0.0
            else:
                status, reason, reward = "ok", call.result.reason, call.result.reward
            sample.reward, sample.reward_status, sample.reward_reason = reward, status, reason
        if count:
            self.record(group)
        return group

    def record(self, group: TrajectoryGroup) -> None:
        for sample in group.samples:
            self._count(sample.reward_status, sample.reward_reason)

    def _count(self, status: str, reason: str) -> None:
        with self.lock:
            self.counts[status] += 1
            self.recent.append(status in FAILURES)
            if status not in FAILURES:
                self.streak_start = None
            else:
                now = time.time()
                self.first_failure = self.first_failure or now
                self.streak_start = self.streak_start or now
            if status in FAILURES and len(self.examples.setdefault(status, [])) < EXAMPLES_PER_REASON:
                self.examples[status].append(reason)

    def stats(self) -> dict:
        """Counts by status, the failure share of the recent window and its size, example messages."""
        with self.lock:
            return {"counts": {k: self.counts.get(k, 0) for k in ("ok", *FAILURES)},
                    "examples": {k: list(v) for k, v in self.examples.items()},
                    "window_failed": sum(self.recent), "window": len(self.recent), "abandoned": self.abandoned,
                    "first_failure": self.first_failure, "streak_start": self.streak_start}


def _failing_since(per_actor: list[dict]) -> float | None:
    """Since when every reward actor that scored anything has failed every sample (None: one is succeeding)."""
    scored = [a for a in per_actor if a["window"]]
    if not scored or any(a["streak_start"] is None for a in scored):
        return None
    return max(a["streak_start"] for a in scored)


def merge_stats(per_actor: list[dict]) -> dict:
    """Every reward actor's stats as one: counts and windows add up, examples are pooled."""
    firsts = [a["first_failure"] for a in per_actor if a["first_failure"] is not None]
    out = {"counts": {k: sum(a["counts"][k] for a in per_actor) for k in ("ok", *FAILURES)},
           "window_failed": sum(a["window_failed"] for a in per_actor), "window": sum(a["window"] for a in per_actor),
           "abandoned": sum(a["abandoned"] for a in per_actor), "calls": sum(a.get("calls", 0) for a in per_actor),
           "examples": {},
           "first_failure": min(firsts) if firsts else None, "failing_since": _failing_since(per_actor)}
    for a in per_actor:
        for reason, msgs in a["examples"].items():
            out["examples"].setdefault(reason, []).extend(msgs[:EXAMPLES_PER_REASON - len(out["examples"][reason])])
    return out


def failing(stats: dict, fn: str, max_fraction: float, window: int, max_failing_s: float, now: float,
            model: str | None = None, teacher: str | None = None) -> str | None:
    """Why the run should stop: more than max_fraction of the last `window` samples failed (known as soon as the
    failures alone pass that share of a full window), or every sample scored for max_failing_s failed (a reward
    that fails on every call, however slowly its failures come, e.g. by hanging). model, teacher: their names,
    blamed instead of the rule function fn when the most failures are theirs."""
    full = max(window, stats["window"])
    if stats["window_failed"] > max_fraction * full:
        why = (f"failed on {stats['window_failed']} of the last {stats['window']} samples "
               f"(reward.max_failure_fraction={max_fraction})")
    elif stats["failing_since"] is not None and now - stats["failing_since"] >= max_failing_s:
        why = f"failed on every sample scored in the last {now - stats['failing_since']:.0f}s (reward.max_failing_s)"
    else:
        return None
    counts = stats["counts"]
    reasons = ", ".join(f"{k} {v}" for k, v in counts.items() if k != "ok" and v)
    first = next((m[0] if m[0].startswith(f"{k}:") else f"{k}: {m[0]}" for k, m in stats["examples"].items() if m), "")
    family = {"model": sum(counts.get(k, 0) for k in MODEL_FAILURES),
              "teacher": sum(counts.get(k, 0) for k in TEACHER_FAILURES)}
    family["rule"] = sum(v for k, v in counts.items() if k != "ok") - family["model"] - family["teacher"]
    names = {"rule": f"reward function {fn}", "model": model or "the reward model", "teacher": teacher or "the teacher"}
    who = names[max(family, key=lambda k: family[k])]
    return f"{who} {why}; failures so far: {reasons}; first: {first}"
