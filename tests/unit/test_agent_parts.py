"""The agent layer's pure parts: tool-call parsing, the tool registry's failure handling, the calculator,
and token-exact continuation of a chat (the new messages' tokens only, after the sampled EOS)."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from rayrl.models.tokenizer import build_chat_tokenizer
from rayrl.workflows.chat import NotAContinuation, continuation_ids, prompt_ids
from rayrl.workflows.multi_turn import discounted
from rayrl.workflows.tool_calls import ToolCall, parse_tool_calls
from rayrl.workflows.tools import Tool, ToolOutput, ToolRegistry, calculator, evaluate_arithmetic

TOOLS = [calculator.schema()]


def test_tool_calls_parse_and_malformed_blocks_stay_as_text():
    good = '<tool_call>{"name": "calculator", "arguments": {"expression": "2+3"}}</tool_call>'
    parsed = parse_tool_calls(f"Let me see. {good}<tool_call>{{oops</tool_call><tool_call>[1]</tool_call>")
    assert [(c.name, json.loads(c.arguments)) for c in parsed.calls] == [("calculator", {"expression": "2+3"})]
    assert len(parsed.errors) == 2 and "not JSON" in parsed.errors[0] and "'name'" in parsed.errors[1]
    assert parsed.content == "Let me see. <tool_call>{oops</tool_call><tool_call>[1]</tool_call>"
    assert parse_tool_calls("just 5").calls == [] and parse_tool_calls("just 5").content == "just 5"
    unclosed = parse_tool_calls('<tool_call>{"name": "calculator", "arguments": {"expression": "1+1"}}')
    assert len(unclosed.calls) == 1  # cut off before its closing tag, still a call


def test_registry_turns_every_bad_call_into_an_observation():
    def slow(**_):
        time.sleep(1.0)

    def boom(x):
        raise RuntimeError("nope")

    reg = ToolRegistry({t.name: t for t in [calculator, Tool("slow", slow, "", {}), Tool("boom", boom, "", {}),
                                            Tool("scored", lambda: ToolOutput("fine", 0.5), "", {})]}, timeout_s=0.2)

    def call(name, args):
        return asyncio.run(reg.call(ToolCall("c", name, args)))

    assert call("calculator", '{"expression": "(7+5)*2"}') == ("24", "ok", 0.0)
    assert call("scored", "{}") == ("fine", "ok", 0.5)
    assert call("nope", "{}")[1] == "unknown_tool"
    assert call("calculator", "[1, 2]")[1] == "bad_arguments"
    assert call("calculator", '{"expr": "1"}')[1] == "bad_arguments"
    assert call("boom", '{"x": 1}')[:2] == ("error: boom raised RuntimeError: nope", "error")
    assert call("slow", "{}")[1] == "timeout"
    assert call("calculator", '{"expression": "__import__(\\"os\\")"}')[1] == "error"
    assert dict(reg.counts) == {"ok": 2, "unknown_tool": 1, "bad_arguments": 2, "error": 2, "timeout": 1}


def test_calculator_is_arithmetic_only():
    assert evaluate_arithmetic("12*3-4") == "32" and evaluate_arithmetic("7/2") == "3.5"
    for bad in ("x+1", "2**8", "len('a')", "1" * 201):
        with pytest.raises((ValueError, SyntaxError)):
            evaluate_arithmetic(bad)


def test_continuation_appends_only_the_new_messages():
    tok = build_chat_tokenizer()
    user = {"role": "user", "content": "Ann has 3 keys and gets 4 more. How many keys?"}
    call = {"id": "c", "type": "function", "function": {"name": "calculator", "arguments": {"expression": "3+4"}}}
    assistant = {"role": "assistant", "content": "", "tool_calls": [call]}
    tool = {"role": "tool", "tool_call_id": "c", "content": "7"}
    first = prompt_ids(tok, [user], TOOLS)
    sampled = tok.encode('<tool_call>{"name": "calculator", "arguments": {"expression": "3+4"}}</tool_call>',
                         add_special_tokens=False) + [tok.eos_token_id]
    new = continuation_ids(tok, [user, assistant], [tool], TOOLS)
    assert tok.decode(new, skip_special_tokens=False) == ("\n<|im_start|>user\n<tool_response>7"
                                                           "</tool_response><|im_end|>\n<|im_start|>assistant\n")
    # here the template renders the turn as sampled, so the record equals a fresh tokenization
    assert first + sampled + new == prompt_ids(tok, [user, assistant, tool], TOOLS)
    assert continuation_ids(tok, [user, assistant], [tool], TOOLS, ended=False)[0] == tok.eos_token_id
    with pytest.raises(NotAContinuation):  # the history renders differently: no exact continuation
        continuation_ids(_Drifting(tok), [user, assistant], [tool], TOOLS)


class _Drifting:
    """A tokenizer whose template renders earlier turns differently once more follow (as templates that
    strip reasoning from earlier turns do)."""

    def __init__(self, tok):
        self.tok, self.eos_token = tok, tok.eos_token

    def apply_chat_template(self, messages, add_generation_prompt=False, **kw):
        return ("v%d:" % len(messages)) + self.tok.apply_chat_template(messages, add_generation_prompt=add_generation_prompt, **kw)


def test_turn_rewards_are_discounted():
    assert discounted([], 1.0, 0.5) == 1.0
    assert discounted([0.2, 0.0], 1.0, 0.5) == pytest.approx(0.2 + 0.5 * 1.0)
