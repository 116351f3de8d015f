"""The OpenAI-compatible gateway against a real rollout worker on CPU, driven by the official openai
client: tool calls come back well-formed, a second turn extends the recorded tokens (never a
re-tokenization), and what the session records is exactly what the engine sampled. Bad agent
behaviour (no session, a malformed body, an edited history, a session never closed) is refused or
counted, never a crash or a leak."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
import ray

from rayrl.data import load_tasks
from rayrl.demo import prepare_models
from rayrl.driver import ActorSystem
from rayrl.types import GenerationRequest
from rayrl.workflows.base import Sampling
from rayrl.workflows.chat import prompt_ids
from rayrl.workflows.tools import calculator, evaluate_arithmetic

import openai  # noqa: E402 - a test dependency: missing, these fail rather than skip
TOOLS = [calculator.schema()]
GREEDY = Sampling(1, 0.0, 72, 0)


@pytest.fixture(scope="module")
def agent_run(ray_cluster, agent_cfg):
    cfg = agent_cfg("agent.session_timeout_s=2")
    system = ActorSystem(cfg, "gateway", models=prepare_models(cfg))
    yield system
    system.close()


async def _session(system):
    sid = await system.gateway.open_session.remote("t", 0, 0, GREEDY, 320)
    return sid, openai.AsyncOpenAI(base_url=f"{system.gateway_url}/sessions/{sid}/v1", api_key="x", max_retries=0)


def test_two_turns_with_tools_record_exactly_the_sampled_tokens(agent_run):
    system, task = agent_run, load_tasks(agent_run.cfg.data)[1][0]

    async def episode():
        sid, client = await _session(system)
        messages = [{"role": "user", "content": task.prompt}]
        first = await client.chat.completions.create(model="rayrl", messages=messages, tools=TOOLS)
        call = first.choices[0].message.tool_calls[0]
        messages += [first.choices[0].message.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": call.id,
                      "content": evaluate_arithmetic(json.loads(call.function.arguments)["expression"])}]
        stream = await client.chat.completions.create(model="rayrl", messages=messages, tools=TOOLS, stream=True)
        text = "".join([c.choices[0].delta.content or "" async for c in stream])
        await client.close()
        return first, text, await system.gateway.close_session.remote(sid)

    first, second_text, end = asyncio.run(episode())
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.tool_calls[0].function.name == "calculator"
    assert set(json.loads(choice.message.tool_calls[0].function.arguments)) == {"expression"}
    s = end.sample
    assert end.retokenized == 0 and s.turns == 2 and s.text == second_text.strip()

    # what the session holds is what the engine samples from those very tokens (greedy, so repeatable)
    tok = ray.get(system.template_ref).tokenizer
    assert s.prompt_ids == prompt_ids(tok, [{"role": "user", "content": task.prompt}], TOOLS)
    mask = s.loss_mask
    turn1_end = mask.index(0)
    turn2_start = turn1_end + mask[turn1_end:].index(1)
    assert all(mask[turn2_start:]) and not any(mask[turn1_end:turn2_start])
    worker = system.rollouts[0]
    redo1, redo2 = ray.get(worker.generate.remote([
        GenerationRequest("a", s.prompt_ids, 1, 72, 0.0),
        GenerationRequest("b", s.prompt_ids + s.completion_ids[:turn2_start], 1, 72, 0.0)]))
    assert redo1.completion_ids == s.completion_ids[:turn1_end]
    assert redo2.completion_ids == s.completion_ids[turn2_start:]
    assert s.logprobs[:turn1_end] == pytest.approx(redo1.logprobs, abs=1e-5)
    # the appended tokens are the tool message, not a re-tokenization of the first turn
    appended = tok.decode(s.completion_ids[turn1_end:turn2_start], skip_special_tokens=False)
    assert "<tool_response>" in appended and "<tool_call>" not in appended


def test_bad_agent_behaviour_is_refused_or_counted(agent_run):
    system = agent_run
    before = ray.get(system.gateway.stats.remote())

    async def misbehave():
        bare = openai.AsyncOpenAI(base_url=f"{system.gateway_url}/v1", api_key="x", max_retries=0)
        with pytest.raises(openai.BadRequestError, match="sessions/<id>/v1"):
            await bare.chat.completions.create(model="rayrl", messages=[{"role": "user", "content": "1"}])
        gone = openai.AsyncOpenAI(base_url=f"{system.gateway_url}/sessions/nope/v1", api_key="x", max_retries=0)
        with pytest.raises(openai.NotFoundError, match="no open session"):
            await gone.chat.completions.create(model="rayrl", messages=[{"role": "user", "content": "1"}])
        sid, client = await _session(system)
        with pytest.raises(openai.BadRequestError, match="'messages' must be"):
            await client.chat.completions.create(model="rayrl", messages=[])
        with pytest.raises(openai.BadRequestError, match="needs a 'role'"):
            await client.chat.completions.create(model="rayrl", messages=[{"content": "hi"}])
        # an edited history cannot extend the record: tokenized afresh, counted
        await client.chat.completions.create(model="rayrl", messages=[{"role": "user", "content": "Ann has 3 keys."}])
        await client.chat.completions.create(model="rayrl", messages=[{"role": "user", "content": "Bob has 4 cups."}])
        end = await system.gateway.close_session.remote(sid)
        abandoned, _ = await _session(system)  # never closed: the gateway reaps it
        await client.close()
        return end, abandoned

    end, abandoned = asyncio.run(misbehave())
    assert end.retokenized == 1 and end.sample.turns == 1
    deadline = time.monotonic() + 30
    while ray.get(system.gateway.stats.remote())["sessions_abandoned"] == before["sessions_abandoned"]:
        assert time.monotonic() < deadline, "an idle session was never reaped"
        time.sleep(0.5)
    after = ray.get(system.gateway.stats.remote())
    assert after["bad_requests"] - before["bad_requests"] == 4 and after["retokenized"] - before["retokenized"] == 1
    assert after["sessions_open"] == 0


def test_built_in_tool_use_workflow_masks_everything_but_the_policy_tokens(agent_run, agent_cfg):
    """rayrl.workflows.multi_turn:ToolUse on a real rollout worker: a calculator call, its result as a
    tool message, the answer; the loss mask covers the two sampled turns only, and the reward judges
    the final answer."""
    from rayrl.actors import RolloutWorker

    system = agent_run
    cfg = agent_cfg("rollout.workflow=rayrl.workflows.multi_turn:ToolUse", "agent.max_turns=3")
    worker = RolloutWorker.options(num_cpus=0).remote(9, cfg, system.model_path, system.buffer,
                                                       system.rewards, 1)
    try:
        tasks = load_tasks(system.cfg.data)[1][:8]
        groups = ray.get(worker.evaluate.remote(tasks, 2, 0.0))
        stats = ray.get(worker.stats.remote())["workflow"]
    finally:
        ray.kill(worker)
    samples = [s for g in groups for s in g.samples]
    assert len(samples) == 16 and all(s.turns == 2 for s in samples), [s.turns for s in samples]
    for s in samples:
        first_zero = s.loss_mask.index(0)
        back = first_zero + s.loss_mask[first_zero:].index(1)
        assert not any(s.loss_mask[first_zero:back]) and all(s.loss_mask[back:]) and all(s.loss_mask[:first_zero])
        assert s.logprobs[first_zero:back] == [0.0] * (back - first_zero)
        assert s.reward == (1.0 if s.text.strip() == next(t.answer for t in tasks if s.request_id.startswith(t.id)) else 0.0)
    assert stats.get("tool_ok", 0) == 16 and not stats.get("malformed_tool_calls")


def test_a_langchain_agent_runs_against_the_gateway(agent_run):
    """recipes/langchain_agent.py: ChatOpenAI with bound tools, through the same session endpoint."""
    from recipes.langchain_agent import solve

    system, task = agent_run, load_tasks(agent_run.cfg.data)[1][1]

    async def episode():
        sid, client = await _session(system)
        await solve(client, task)
        return await system.gateway.close_session.remote(sid)

    end = asyncio.run(episode())
    assert end.sample.turns == 2 and end.retokenized == 0 and end.reward in (0.0, 1.0)
    assert end.reward == (1.0 if end.sample.text.strip() == task.answer else 0.0)
