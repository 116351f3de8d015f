"""OpenAI chat-completions schema: request checks, response and stream-chunk bodies, error bodies."""

from __future__ import annotations

import time
import uuid

from rayrl.types import Sample
from rayrl.workflows.tool_calls import ParsedTurn

ROLES = ("system", "user", "assistant", "tool", "developer")


class BadRequest(ValueError):
    """A request the endpoint refuses; the message says what was wrong and what is expected."""


def check_request(body) -> dict:
    """The fields the gateway uses, checked: messages, tools, stream, max_tokens."""
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty list of {role, content} objects")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            raise BadRequest(f"messages[{i}] needs a 'role', one of {', '.join(ROLES)}")
        if m["role"] == "developer":
            m["role"] = "system"
    tools = body.get("tools")
    if tools is not None and (not isinstance(tools, list) or
                              not all(isinstance(t, dict) and isinstance(t.get("function"), dict) for t in tools)):
        raise BadRequest("'tools' must be a list of {type: function, function: {name, parameters}} objects")
    if body.get("n", 1) != 1:
        raise BadRequest("'n' must be 1: each agent episode is one session")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
        raise BadRequest("'max_tokens' must be a positive integer")
    return {"messages": messages, "tools": tools, "stream": bool(body.get("stream", False)),
            "max_tokens": max_tokens, "model": str(body.get("model", "rayrl"))}


def assistant_message(parsed: ParsedTurn) -> dict:
    """The assistant message as returned (and as a client sends it back next turn)."""
    message: dict = {"role": "assistant", "content": parsed.content or None}
    if parsed.calls:
        message["tool_calls"] = [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                                 for c in parsed.calls]
    return message


def finish_reason(sample: Sample, parsed: ParsedTurn) -> str:
    if parsed.calls:
        return "tool_calls"
    return "length" if sample.finish_reason == "length" else "stop"


def completion_body(model: str, sample: Sample, parsed: ParsedTurn) -> dict:
    return {"id": f"chatcmpl-{uuid.uuid4().hex[:16]}", "object": "chat.completion", "created": int(time.time()),
            "model": model, "choices": [{"index": 0, "message": assistant_message(parsed), "logprobs": None,
                                         "finish_reason": finish_reason(sample, parsed)}],
            "usage": {"prompt_tokens": len(sample.prompt_ids), "completion_tokens": len(sample.completion_ids),
                      "total_tokens": len(sample.prompt_ids) + len(sample.completion_ids)}}


def stream_chunks(model: str, sample: Sample, parsed: ParsedTurn) -> list[dict]:
    """The completion as chat.completion.chunk objects: role, content, each tool call, the finish."""
    cid, created = f"chatcmpl-{uuid.uuid4().hex[:16]}", int(time.time())

    def chunk(delta: dict, finish: str | None = None) -> dict:
        return {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}

    out = [chunk({"role": "assistant", "content": ""})]
    if parsed.content:
        out.append(chunk({"content": parsed.content}))
    for i, c in enumerate(parsed.calls):
        out.append(chunk({"tool_calls": [{"index": i, "id": c.id, "type": "function",
                                          "function": {"name": c.name, "arguments": c.arguments}}]}))
    out.append(chunk({}, finish_reason(sample, parsed)))
    return out


def error_body(message: str, kind: str = "invalid_request_error") -> dict:
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}
