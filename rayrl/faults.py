"""Driver-side fault handling: a rollout worker that died and restarted rejoins before it generates,
a dead learner rank stops the run naming the last checkpoint, SIGTERM checkpoints and stops."""

from __future__ import annotations

import logging
import signal
import threading
import time

import ray

log = logging.getLogger("rayrl")


class RunStopped(RuntimeError):
    """The run stopped before its last step (SIGTERM, or a fault it cannot survive); the message says
    where it can continue from, exit_code what the process exits with."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def wait_all(refs: list[ray.ObjectRef], names: list[str], what: str, timeout_s: float | None = None) -> list:
    """Every result, or an error naming the first actor that failed or, after timeout_s, those that
    had not answered: never a hang, never a failure that waits for the slowest peer."""
    pending, index = list(refs), {r: i for i, r in enumerate(refs)}
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while pending:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        ready, pending = ray.wait(pending, num_returns=1, timeout=left)
        if not ready:
            late = ", ".join(names[index[r]] for r in pending)
            raise TimeoutError(f"{what} did not finish within {timeout_s:.0f}s on {late}")
        try:
            ray.get(ready[0])
        except ray.exceptions.RayError as err:
            raise _failed(names[index[ready[0]]], what, err) from err
    return ray.get(refs)


class ActorFailed(RuntimeError):
    """A call to a named actor failed; name says which actor."""

    def __init__(self, message: str, name: str = "") -> None:
        super().__init__(message)
        self.name = name

    def __reduce__(self):  # crosses actor boundaries with its name
        return ActorFailed, (str(self), self.name)


def _failed(name: str, what: str, err: Exception) -> ActorFailed:
    first = (str(err).strip().splitlines() or [""])[-1][:300]
    return ActorFailed(f"{what} failed on {name}: {type(err).__name__}: {first}", name)


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


class RolloutHealer:
    """Finds rollout workers whose loop ended because the actor died; once Ray has restarted them,
    their leased prompts go back to the queue, the sync group is formed anew with them, every worker
    gets the current weights, and their loops start again."""

    def __init__(self, rollouts: list, buffer, broadcaster, restart_timeout_s: float) -> None:
        self.rollouts, self.buffer, self.broadcaster = rollouts, buffer, broadcaster
        self.restart_timeout_s = restart_timeout_s
        self.restarts = [0] * len(rollouts)
        self.recoveries: list[dict] = []  # when each death was seen and how long bringing it back took

    def dead(self, run_refs: list) -> list[int]:
        """Workers whose loop ended by the actor's death; a loop that raised or returned early raises."""
        done, _ = ray.wait(run_refs, num_returns=len(run_refs), timeout=0)
        out = []
        for ref in done:
            i = run_refs.index(ref)
            try:
                ray.get(ref)
            except ray.exceptions.RayActorError:
                out.append(i)
                continue
            raise RuntimeError(f"rollout-{i}'s loop ended while training was still running")
        return out

    def heal(self, run_refs: list, dead: list[int]) -> None:
        seen_at, t0 = time.time(), time.perf_counter()
        for i in dead:
            ray.get(self.buffer.requeue.remote(i))  # counted in the buffer's ledger
        deadline = time.monotonic() + self.restart_timeout_s
        for i in dead:
            self._await_restart(i, deadline)
        ray.get(self.broadcaster.rejoin.remote())
        for i in dead:
            self.restarts[i] += 1
            ray.get(self.rollouts[i].mark_restart.remote(self.restarts[i]))
            run_refs[i] = self.rollouts[i].run.remote()
            self.recoveries.append({"worker": f"rollout-{i}", "seen_at": seen_at, "heal_s": time.perf_counter() - t0})
            log.info("rollout-%d restarted (restart %d); rejoined at the current weights, its prompts requeued",
                     i, self.restarts[i])


    def _await_restart(self, i: int, deadline: float) -> None:
        """Calls to a restarting actor fail at once (ActorUnavailableError): ask again until it answers."""
        while True:
            try:
                ray.get(self.rollouts[i].health.remote(), timeout=max(0.1, deadline - time.monotonic()))
                return
            except ray.exceptions.ActorUnavailableError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"rollout-{i} did not come back within rollout.restart_timeout_s="
                                       f"{self.restart_timeout_s:.0f}s") from None
                time.sleep(0.5)
            except ray.exceptions.ActorDiedError as err:
                raise RunStopped(f"rollout-{i} died and cannot be restarted (rollout.max_restarts spent, or its "
                                 f"restart failed): {str(err).strip().splitlines()[-1][:300]}") from None
            except ray.exceptions.GetTimeoutError:
                raise TimeoutError(f"rollout-{i} did not come back within rollout.restart_timeout_s="
                                   f"{self.restart_timeout_s:.0f}s") from None


def learner_stopped(learners, last_checkpoint: str | None, err: Exception) -> RunStopped | None:
    """If a learner rank is dead, the error to stop the run with (naming the rank and where to resume)."""
    dead = learners.dead_ranks()
    if not dead:
        return None
    where = (f"the last checkpoint is {last_checkpoint}; run again with checkpoint.resume=auto to continue "
             "from it" if last_checkpoint else "no checkpoint was written (set checkpoint.every_steps)")
    return RunStopped(f"learner rank {', '.join(map(str, dead))} died ({type(err).__name__}); the run stopped: "
                      f"{where}")
