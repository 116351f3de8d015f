"""Chat-template token ids for multi-turn episodes, token-exact: earlier turns are never re-tokenized.

A follow-up turn's prompt is the recorded ids (prompt, then every sampled and appended token) plus
the ids of the new messages, cut from the template's rendering of the whole history."""

from __future__ import annotations

import json
from typing import Any


class NotAContinuation(ValueError):
    """The new messages do not extend the recorded history the way the chat template renders it."""


def render(tokenizer, messages: list[dict], tools: list[dict] | None, add_generation_prompt: bool) -> str:
    return tokenizer.apply_chat_template(messages, tools=tools or None, tokenize=False,
                                         add_generation_prompt=add_generation_prompt)


def prompt_ids(tokenizer, messages: list[dict], tools: list[dict] | None = None) -> list[int]:
    """The first turn's prompt: the whole conversation rendered, ready for the assistant to answer."""
    return tokenizer.encode(render(tokenizer, messages, tools, True), add_special_tokens=False)


def continuation_ids(tokenizer, history: list[dict], new: list[dict], tools: list[dict] | None = None,
                     ended: bool = True) -> list[int]:
    """Ids that follow the last sampled assistant turn of `history` when `new` messages come next,
    up to the next assistant prompt. ended: the sampled turn stopped with EOS (else EOS is added)."""
    before = render(tokenizer, history, tools, False)
    after = render(tokenizer, history + new, tools, True)
    if not after.startswith(before):
        raise NotAContinuation("the chat template renders the history differently once the new messages follow")
    eos = tokenizer.eos_token
    cut = before.rfind(eos)
    if cut < 0:
        raise NotAContinuation(f"the chat template does not end an assistant turn with EOS ({eos!r})")
    tail = before[cut + len(eos):] + after[len(before):]  # e.g. "\n" after EOS, then the new messages
    ids = tokenizer.encode(tail, add_special_tokens=False)
    return ids if ended else [tokenizer.eos_token_id, *ids]


def normalize(message: Any) -> dict:
    """A chat message (dict or the openai SDK's object) as the fields that decide its tokens."""
    if hasattr(message, "model_dump"):
        message = message.model_dump(exclude_none=True)
    content = message.get("content")
    if isinstance(content, list):  # content parts: the text ones, joined
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    calls = [(c.get("id", ""), c["function"]["name"], c["function"].get("arguments", ""))
             for c in message.get("tool_calls") or []]
    return {"role": message.get("role"), "content": content or "", "tool_calls": calls,
            "tool_call_id": message.get("tool_call_id", "")}


def as_template_message(message: Any) -> dict:
    """What apply_chat_template receives: plain dicts, tool-call arguments as parsed JSON where they parse."""
    m = normalize(message)
    out: dict = {"role": m["role"], "content": m["content"]}
    if m["tool_calls"]:
        calls = []
        for cid, name, args in m["tool_calls"]:
            try:
                parsed = json.loads(args) if isinstance(args, str) else args
            except ValueError:
                parsed = args
            calls.append({"id": cid, "type": "function", "function": {"name": name, "arguments": parsed}})
        out["tool_calls"] = calls
    if m["tool_call_id"]:
        out["tool_call_id"] = m["tool_call_id"]
    return out
