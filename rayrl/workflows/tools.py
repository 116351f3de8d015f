"""Tools an agent may call: a registry by name, each call in a thread under a deadline.

A tool is a Python function taking keyword arguments and returning text (or anything str() can show);
its OpenAI schema travels with it. Bad calls (unknown tool, bad arguments, a raise, a timeout) come
back as an error observation and a counted reason, never as an exception."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from rayrl.calculator import evaluate_arithmetic
from rayrl.imports import load_object
from rayrl.workflows.tool_calls import ToolCall

TOOL_FAILURES = ("unknown_tool", "bad_arguments", "error", "timeout")


@dataclass(frozen=True)
class ToolOutput:
    """What a tool may return instead of plain text: the text plus a reward for this turn."""

    text: str
    reward: float = 0.0


@dataclass
class Tool:
    name: str
    fn: Callable[..., object]
    description: str
    parameters: dict  # JSON schema of the keyword arguments

    def schema(self) -> dict:
        """OpenAI's `tools` entry."""
        return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                 "parameters": self.parameters}}


@dataclass
class ToolRegistry:
    tools: dict[str, Tool]
    timeout_s: float
    counts: Counter = field(default_factory=Counter)  # "ok" and each failure reason

    @classmethod
    def from_specs(cls, specs: list[str], timeout_s: float) -> "ToolRegistry":
        """specs: import strings of Tool objects ('pkg.mod:tool')."""
        tools = {}
        for spec in specs:
            tool = load_object(spec, "agent.tools")
            if not isinstance(tool, Tool):
                raise ValueError(f"agent.tools entry '{spec}' is a {type(tool).__name__}, not a rayrl.workflows.tools.Tool")
            tools[tool.name] = tool
        return cls(tools, timeout_s)

    def schemas(self) -> list[dict]:
        return [t.schema() for t in self.tools.values()]

    async def call(self, call: ToolCall) -> tuple[str, str, float]:
        """(observation text, status, turn reward): status "ok" or one of TOOL_FAILURES."""
        tool = self.tools.get(call.name)
        if tool is None:
            return self._fail("unknown_tool", f"error: unknown tool '{call.name}'; tools: {', '.join(self.tools)}")
        try:
            kwargs = json.loads(call.arguments)
            if not isinstance(kwargs, dict):
                raise ValueError("arguments must be a JSON object")
        except ValueError as err:
            return self._fail("bad_arguments", f"error: bad arguments for {call.name}: {err}")
        try:
            result = await asyncio.wait_for(asyncio.to_thread(tool.fn, **kwargs), self.timeout_s)
        except asyncio.TimeoutError:
            return self._fail("timeout", f"error: {call.name} took longer than {self.timeout_s}s")
        except TypeError as err:
            return self._fail("bad_arguments", f"error: bad arguments for {call.name}: {err}")
        except Exception as err:  # noqa: BLE001 - a tool's failure is the agent's observation
            return self._fail("error", f"error: {call.name} raised {type(err).__name__}: {err}")
        self.counts["ok"] += 1
        if isinstance(result, ToolOutput):
            return result.text, "ok", float(result.reward)
        return str(result), "ok", 0.0

    def _fail(self, reason: str, text: str) -> tuple[str, str, float]:
        self.counts[reason] += 1
        return text, reason, 0.0


calculator = Tool("calculator", evaluate_arithmetic, "Evaluate an arithmetic expression (+ - * / and parentheses).",
                  {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]})
