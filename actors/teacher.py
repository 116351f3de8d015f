"""TeacherActor: a frozen teacher (teacher.*) serving the reward actors with the log-prob of every token the
student sampled. The requests that arrive while an engine call runs go together into the next one."""

from __future__ import annotations

import os

import ray

from rayrl import components
from rayrl.batched_calls import BatchedCalls
from rayrl.config import TeacherConfig, VLLMConfig
from rayrl.metrics import RayMetrics
from rayrl.types import TokenScoreRequest

COUNTERS = {"teacher_requests_total": "calls from reward actors", "teacher_tokens_total": "tokens scored",
            "teacher_engine_calls_total": "batched engine calls"}


@ray.remote(num_cpus=0)
class TeacherActor:
    def __init__(self, teacher: TeacherConfig, temperature: float, on_gpu: bool, index: int = 0,
                 num_threads: int = 1, vllm: VLLMConfig | None = None) -> None:
        """Also what a restart runs: the teacher comes back from teacher.path. temperature: the student's sampling
        temperature, at which the teacher's log-probs are taken; vllm: the vllm section (teacher.engine=vllm)."""
        self.engine = components.teacher(teacher, temperature, on_gpu, num_threads, vllm)
        self.calls = BatchedCalls(self.engine.score)
        self.requests, self.tokens, self.counted_calls = 0, 0, 0
        self.metrics = RayMetrics("teacher", f"teacher-{index}", COUNTERS)

    async def score(self, requests: list[TokenScoreRequest]) -> list[list[float]]:
        """Each request's completion log-probs, in order; waits for the engine call it joined."""
        self.requests += 1
        scores = await self.calls(requests)
        tokens = sum(len(r.completion_ids) for r in requests)
        self.tokens += tokens
        self.metrics.inc("teacher_requests_total")
        self.metrics.inc("teacher_tokens_total", tokens)
        self.metrics.inc("teacher_engine_calls_total", self.calls.calls - self.counted_calls)
        self.counted_calls = self.calls.calls
        return scores

    def stats(self) -> dict:
        """Totals since this process started (a restart begins again at zero), and its pid."""
        c = self.calls
        return {"requests": self.requests, "samples": c.items, "tokens": self.tokens, "engine_calls": c.calls,
                "busy_s": c.busy_s, "pid": os.getpid()}

    def health(self) -> bool:
        return True
