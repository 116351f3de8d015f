"""A calculator-tool agent, written against the official OpenAI SDK, trained with GRPO on CPU.

    python recipes/calculator_agent.py --config recipes/calculator_agent.yaml

`solve` is all the agent code there is: rayrl runs it once per sample, its client pointed at the run's
gateway, and trains on the tokens the gateway recorded."""

import json

from rayrl.workflows.openai_agent import set_reward
from rayrl.workflows.tools import calculator, evaluate_arithmetic

TOOLS = [calculator.schema()]


async def solve(client, task) -> None:
    """Ask the model, run the calculator calls it makes, and reward a final answer equal to the task's."""
    messages = [{"role": "user", "content": task.prompt}]
    for _ in range(3):
        reply = await client.chat.completions.create(model="rayrl", messages=messages, tools=TOOLS)
        message = reply.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            break
        for call in message.tool_calls:
            try:
                result = evaluate_arithmetic(json.loads(call.function.arguments)["expression"])
            except (ValueError, KeyError, TypeError, SyntaxError, ZeroDivisionError) as err:
                result = f"error: {err}"
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    answer = (message.content or "").strip()
    await set_reward(client, 1.0 if answer == task.answer else 0.0)


if __name__ == "__main__":
    from rayrl.cli import parse_args, run

    run(parse_args(prog="calculator_agent"))
