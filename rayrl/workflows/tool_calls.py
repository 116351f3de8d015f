"""Qwen-style tool calls in sampled text: <tool_call>{"name": ..., "arguments": {...}}</tool_call>."""

from __future__ import annotations

import json
import re
import uuid

import msgspec

_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)


class ToolCall(msgspec.Struct, frozen=True):
    id: str
    name: str
    arguments: str  # a JSON object, as OpenAI's schema carries it


class ParsedTurn(msgspec.Struct):
    """An assistant turn's text split into its content and tool calls; errors: the blocks that did not parse."""

    content: str
    calls: list[ToolCall]
    errors: list[str]


def parse_tool_calls(text: str) -> ParsedTurn:
    """Every <tool_call> block is parsed; a malformed one is reported in errors (never raised)."""
    calls, errors = [], []

    def take(match: re.Match) -> str:
        """A well-formed block leaves the content; a malformed one stays in it, as the text it is."""
        block = match.group(1).strip()
        try:
            obj = json.loads(block)
        except ValueError as err:
            errors.append(f"tool call is not JSON ({err.msg}): {block[:80]!r}")
            return match.group(0)
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
            errors.append(f"tool call needs a 'name' string: {block[:80]!r}")
            return match.group(0)
        args = obj.get("arguments", {})
        if not isinstance(args, dict):
            errors.append(f"tool call 'arguments' must be an object: {block[:80]!r}")
            return match.group(0)
        calls.append(ToolCall(f"call_{uuid.uuid4().hex[:12]}", obj["name"], json.dumps(args)))
        return ""

    content = _BLOCK.sub(take, text).strip()
    return ParsedTurn(content, calls, errors)
