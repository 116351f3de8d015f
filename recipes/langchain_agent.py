"""The calculator agent written with LangChain (langchain-openai) instead of the bare OpenAI SDK: the
same gateway session, reached through ChatOpenAI's base_url.

    python recipes/calculator_agent.py --config recipes/calculator_agent.yaml agent.fn=recipes.langchain_agent:solve
"""

from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

from rayrl.workflows.openai_agent import set_reward
from rayrl.workflows.tools import evaluate_arithmetic


@tool
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression (+ - * / and parentheses)."""
    try:
        return evaluate_arithmetic(expression)
    except (ValueError, SyntaxError, ZeroDivisionError) as err:
        return f"error: {err}"


async def solve(client, task) -> None:
    """client: the session's OpenAI client; LangChain only needs its base_url."""
    llm = ChatOpenAI(model="rayrl", base_url=str(client.base_url), api_key="rayrl", max_retries=0).bind_tools([calculator])
    messages = [HumanMessage(task.prompt)]
    for _ in range(3):
        reply = await llm.ainvoke(messages)
        messages.append(reply)
        if not reply.tool_calls:
            break
        for call in reply.tool_calls:
            messages.append(ToolMessage(calculator.invoke(call["args"]), tool_call_id=call["id"]))
    answer = str(reply.content).strip()
    await set_reward(client, 1.0 if answer == task.answer else 0.0)
