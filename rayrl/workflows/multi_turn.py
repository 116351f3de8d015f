"""Multi-turn tool use: the policy answers or calls tools in Qwen-style <tool_call> blocks; each result
comes back as a tool message, appended as tokens (earlier turns are never re-tokenized) and kept out of
the loss. Episode reward: sum over turns t of agent.turn_discount**t * r_t, where r_t is what the
turn's tools returned (ToolOutput.reward) and the last turn adds reward.fn's score of the final answer."""

from __future__ import annotations

import asyncio
from collections import Counter

from rayrl.config import AgentConfig
from rayrl.types import Task, TrajectoryGroup
from rayrl.workflows.base import EpisodeEngine
from rayrl.workflows.chat import as_template_message, continuation_ids, prompt_ids
from rayrl.workflows.tool_calls import parse_tool_calls
from rayrl.workflows.tools import ToolRegistry
from rayrl.workflows.trajectory import TurnRecorder


def first_messages(task: Task, system_prompt: str | None) -> list[dict]:
    system = [{"role": "system", "content": system_prompt}] if system_prompt else []
    return [*system, {"role": "user", "content": task.prompt}]


def discounted(turn_rewards: list[float], final: float, gamma: float) -> float:
    """sum_t gamma**t r_t with the final answer's reward added to the last turn."""
    rewards = [*turn_rewards[:-1], (turn_rewards[-1] if turn_rewards else 0.0) + final]
    return sum(gamma ** t * r for t, r in enumerate(rewards))


class ToolUse:
    def __init__(self, agent: AgentConfig) -> None:
        self.agent = agent
        self.tools = ToolRegistry.from_specs(agent.tools, agent.tool_timeout_s)
        self.counts: Counter = Counter()  # malformed tool calls, episodes out of turns or context

    async def arun_episode(self, engine: EpisodeEngine, task: Task) -> TrajectoryGroup:
        runs = await asyncio.gather(*(self._episode(engine, task, i) for i in range(engine.sampling.n)))
        group = await engine.score(TrajectoryGroup(task, [sample for sample, _ in runs]))
        for sample, turn_rewards in runs:
            sample.reward = discounted(turn_rewards, sample.reward, self.agent.turn_discount)
        return group

    async def _episode(self, engine: EpisodeEngine, task: Task, index: int):
        tok, schemas = engine.tokenizer, self.tools.schemas()
        messages = first_messages(task, self.agent.system_prompt)
        rec = TurnRecorder(f"{task.id}/{index}", prompt_ids(tok, messages, schemas))
        turn_rewards: list[float] = []
        for turn in range(self.agent.max_turns):
            room = engine.max_context - len(rec.context())
            if room <= 0:
                self.counts["out_of_context"] += 1
                break
            request = engine.sampling.request(f"{task.id}/{index}/{turn}", rec.context(), n=1,
                                              max_new_tokens=min(engine.sampling.max_new_tokens, room))
            [sample] = await engine.generate([request])
            rec.add_turn(sample)
            parsed = parse_tool_calls(sample.text)
            self.counts["malformed_tool_calls"] += len(parsed.errors)
            if (not parsed.calls and not parsed.errors) or sample.finish_reason != "stop":
                turn_rewards.append(0.0)
                break  # a final answer, or a turn cut off at max_new_tokens
            if turn + 1 == self.agent.max_turns:
                self.counts["out_of_turns"] += 1
                turn_rewards.append(0.0)
                break
            assistant = {"role": "assistant", "content": parsed.content,
                         "tool_calls": [{"id": c.id, "type": "function",
                                         "function": {"name": c.name, "arguments": c.arguments}} for c in parsed.calls]}
            observations, reward = await self._observe(parsed)
            turn_rewards.append(reward)
            rec.add_environment(continuation_ids(tok, [*messages, as_template_message(assistant)], observations, schemas))
            messages += [as_template_message(assistant), *observations]
        return rec.sample(), turn_rewards

    async def _observe(self, parsed) -> tuple[list[dict], float]:
        """Tool messages for the turn's calls (run concurrently) and its malformed blocks; the turn's reward."""
        results = await asyncio.gather(*(self.tools.call(c) for c in parsed.calls))
        messages = [{"role": "tool", "tool_call_id": c.id, "content": text} for c, (text, _, _) in zip(parsed.calls, results)]
        messages += [{"role": "tool", "content": f"error: {e}"} for e in parsed.errors]
        return messages, sum(r for _, _, r in results)

    def stats(self) -> dict:
        return {**{f"tool_{k}": v for k, v in self.tools.counts.items()}, **self.counts}

