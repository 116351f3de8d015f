"""Failures as types: an actor that failed or did not answer (LearnerFailed: the run stops; RolloutFailed: the
worker is brought back), a run that stopped early (RunStopped, with its exit code), SIGTERM (StopRequest), and
wait_all, which turns a group of calls into results or the first failure, never a hang."""

from __future__ import annotations

import signal
import threading
import time

import ray

class RunStopped(RuntimeError):
    """The run stopped before its last step (SIGTERM, or a fault it cannot survive); the message says
    where it can continue from, exit_code what the process exits with."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class ActorFailed(RuntimeError):
    """A call to a named actor failed or did not answer in time; name says which actor."""

    def __init__(self, message: str, name: str = "") -> None:
        super().__init__(message)
        self.name = name

    def __reduce__(self):  # crosses actor boundaries with its name
        return type(self), (str(self), self.name)


class LearnerFailed(ActorFailed):
    """A learner or critic rank failed: the run cannot go on without it and stops, naming the checkpoint."""


class RolloutFailed(ActorFailed):
    """A rollout worker failed or did not answer: the driver restarts it and redoes what it was part of."""


def wait_all(refs: list[ray.ObjectRef], names: list[str], what: str, timeout_s: float | None = None,
             failure: type[ActorFailed] | list[type[ActorFailed]] = ActorFailed) -> list:
    """Every result, or `failure` (per ref, or one for all) naming the first actor that failed or, after
    timeout_s, those that had not answered: never a hang, never a failure that waits for the slowest peer."""
    kinds = failure if isinstance(failure, list) else [failure] * len(refs)
    pending, index = list(refs), {r: i for i, r in enumerate(refs)}
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while pending:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        ready, pending = ray.wait(pending, num_returns=1, timeout=left)
        if not ready:
            late = [index[r] for r in pending]
            raise kinds[late[0]](f"{what} did not finish within {timeout_s:.0f}s on "
                                 f"{', '.join(names[i] for i in late)}", names[late[0]])
        try:
            ray.get(ready[0])
        except ray.exceptions.RayError as err:
            i = index[ready[0]]
            first = (str(err).strip().splitlines() or [""])[-1][:300]
            raise kinds[i](f"{what} failed on {names[i]}: {type(err).__name__}: {first}", names[i]) from err
    return ray.get(refs)


class StopRequest:
    """Set by SIGTERM (a preempted node, `ray job stop`, Kubernetes); the loop checkpoints at the end
    of the step and stops. Installed only from the main thread (the place signals arrive)."""

    def __init__(self) -> None:
        self.signal: int | None = None
        self.previous = None
        if threading.current_thread() is threading.main_thread():
            self.previous = signal.signal(signal.SIGTERM, self._set)

    def _set(self, signum, _frame) -> None:
        self.signal = signum

    def __bool__(self) -> bool:
        return self.signal is not None

    def uninstall(self) -> None:
        if self.previous is not None:
            signal.signal(signal.SIGTERM, self.previous)
