"""Agents written against the OpenAI client: agent.fn(client, task) runs once per sample, its client's
base_url a gateway session; the session's recorded tokens become the sample. Reward: what agent.fn
returns, else what it set through the client (rayrl.workflows.openai_agent.set_reward), else reward.fn
on the last answer. An agent that raises or times out is counted and its sample scores 0."""

from __future__ import annotations

import asyncio
import numbers
import os
from collections import Counter

from rayrl.imports import load_object
from rayrl.config import AgentConfig
from rayrl.types import Task, TrajectoryGroup
from rayrl.workflows.base import EpisodeEngine


async def set_reward(client, reward: float) -> None:
    """The episode's reward, set through the agent's own OpenAI client."""
    import httpx

    await client.post("/reward", body={"reward": float(reward)}, cast_to=httpx.Response)


class OpenAIAgent:
    def __init__(self, agent: AgentConfig) -> None:
        self.fn = load_object(agent.fn, "agent.fn", [os.getcwd()], "function")
        if not asyncio.iscoroutinefunction(self.fn):
            raise ValueError(f"agent.fn '{agent.fn}' must be an async function (client, task) -> reward or None")
        self.timeout_s = agent.episode_timeout_s
        self.counts: Counter = Counter()
        self.errors: list[str] = []  # the first few agent failures, for the run's summary
        self.http = None  # one HTTP connection pool for every episode's client (a new one per client cost ~30 ms)

    async def arun_episode(self, engine: EpisodeEngine, task: Task) -> TrajectoryGroup | None:
        if engine.gateway is None:
            raise RuntimeError("OpenAIAgent needs the gateway (agent.gateway must not be false)")
        runs = await asyncio.gather(*(self._one(engine, task, i) for i in range(engine.sampling.n)))
        if any(sample is None for sample, _ in runs):
            self.counts["rejected_no_turn"] += 1  # an episode that never asked the model: nothing to train
            return None
        group = TrajectoryGroup(task, [sample for sample, _ in runs])
        unscored = [s for s, reward in runs if reward is None]
        if unscored:
            await engine.score(TrajectoryGroup(task, unscored))  # scores those samples in place
        for sample, reward in runs:
            if reward is not None:
                sample.reward, sample.reward_status, sample.reward_reason = reward, "ok", "set by the agent"
        return group

    async def _one(self, engine: EpisodeEngine, task: Task, index: int):
        import httpx
        import openai

        if self.http is None:
            # a small pool: httpcore checks every idle connection on each request
            self.http = httpx.AsyncClient(timeout=self.timeout_s, limits=httpx.Limits(max_connections=32))
        sid = await engine.gateway.open_session.remote(task.id, index, engine.worker, engine.sampling, engine.max_context)
        client = openai.AsyncOpenAI(base_url=f"{engine.gateway_url}/sessions/{sid}/v1", api_key="rayrl",
                                    max_retries=0, timeout=self.timeout_s, http_client=self.http)
        value, failed = None, False
        try:
            value = await asyncio.wait_for(self.fn(client, task), self.timeout_s)
        except asyncio.TimeoutError:
            failed = self._failed("agent_timeouts", f"agent.fn took longer than {self.timeout_s}s")
        except Exception as err:  # noqa: BLE001 - the agent's failure is a counted, zero-reward episode
            failed = self._failed("agent_errors", f"{type(err).__name__}: {err}")
        end = await engine.gateway.close_session.remote(sid)
        if failed:
            return end.sample, 0.0
        if value is not None and not isinstance(value, numbers.Real):
            self._failed("agent_wrong_type", f"agent.fn returned {type(value).__name__}, not a number or None")
            return end.sample, 0.0
        return end.sample, float(value) if value is not None else end.reward

    def _failed(self, key: str, message: str) -> bool:
        self.counts[key] += 1
        if len(self.errors) < 5:
            self.errors.append(message[:300])
        return True

    def stats(self) -> dict:
        return dict(self.counts)
