"""Gateway: the run's OpenAI-compatible endpoint, an aiohttp server inside a Ray actor on 127.0.0.1.

Agent code talks to /sessions/<id>/v1/chat/completions (that prefix is the client's base_url); each
session routes to the rollout worker running its episode, records every turn's token ids, behaviour
log-probs and versions (token-in/token-out), and takes the agent's reward at /sessions/<id>/v1/reward."""

from __future__ import annotations

import asyncio
import json
import math
import time
import uuid
from collections import Counter

import ray
from aiohttp import web

from rayrl.config import Config
from rayrl.data.template import PromptTemplate
from rayrl.metrics import RayMetrics
from rayrl.workflows.base import Sampling
from rayrl.workflows.openai_api import BadRequest, assistant_message, check_request, completion_body, error_body, stream_chunks
from rayrl.workflows.sessions import Session, SessionEnd
from rayrl.workflows.tool_calls import parse_tool_calls

COUNTED = {"sessions_opened": "sessions opened", "sessions_closed": "sessions closed by their episode",
           "sessions_abandoned": "sessions closed by the gateway after agent.session_timeout_s idle",
           "turns": "chat completions served", "retokenized": "requests whose history did not extend the record",
           "malformed_tool_calls": "<tool_call> blocks that did not parse (returned as text)",
           "bad_requests": "requests refused with HTTP 4xx", "failed_requests": "requests whose generation failed"}


@ray.remote(num_cpus=0)
class Gateway:
    def __init__(self, cfg: Config, template: PromptTemplate, workers: list) -> None:
        self.cfg, self.tokenizer, self.workers = cfg, template.tokenizer, workers
        self.sessions: dict[str, Session] = {}
        self.counts: Counter = Counter()
        self.metrics = RayMetrics("gateway", "gateway", {f"gateway_{k}_total": v for k, v in COUNTED.items()},
                                  {"gateway_sessions_open": "sessions open now"})
        self.url = ""

    async def start(self) -> str:
        """Serve on agent.gateway_host:agent.gateway_port (0: a free port); returns the base URL."""
        app = web.Application(client_max_size=16 << 20)
        app.router.add_post("/sessions/{sid}/v1/chat/completions", self._chat)
        app.router.add_post("/sessions/{sid}/v1/reward", self._reward)
        app.router.add_get("/sessions/{sid}/v1/models", self._models)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/chat/completions", self._no_session)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        a = self.cfg.agent
        site = web.TCPSite(self.runner, a.gateway_host, a.gateway_port)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        self.url = f"http://{a.gateway_host}:{port}"
        self.reaper = asyncio.create_task(self._reap_idle())
        return self.url

    def set_workers(self, workers: list) -> None:
        """The rollout workers, by index (they are created after the gateway, which they are given)."""
        self.workers = workers

    # ---- sessions (called by the episode that owns them) --------------------------------------
    async def open_session(self, task_id: str, index: int, worker: int, sampling: Sampling, max_context: int) -> str:
        sid = uuid.uuid4().hex  # URL-safe, whatever the task id holds
        self.sessions[sid] = Session(sid, worker, sampling, max_context)
        self._count("sessions_opened")
        return sid

    async def close_session(self, sid: str) -> SessionEnd:
        """The session's episode; a session the gateway already reaped ends empty."""
        session = self.sessions.pop(sid, None)
        self.metrics.set("gateway_sessions_open", len(self.sessions))
        if session is None:
            return SessionEnd(None, None, 0)
        self._count("sessions_closed")
        return session.end()

    def stats(self) -> dict:
        return {k: self.counts.get(k, 0) for k in COUNTED} | {"sessions_open": len(self.sessions)}

    def _count(self, key: str, n: int = 1) -> None:
        self.counts[key] += n
        self.metrics.inc(f"gateway_{key}_total", n)
        self.metrics.set("gateway_sessions_open", len(self.sessions))

    async def _reap_idle(self) -> None:
        """Sessions nobody used for agent.session_timeout_s are closed: counted, never leaked."""
        timeout = self.cfg.agent.session_timeout_s
        while True:
            await asyncio.sleep(min(timeout, 5.0))
            now = time.monotonic()
            for sid in [s for s, sess in self.sessions.items() if now - sess.last_used > timeout]:
                del self.sessions[sid]
                self._count("sessions_abandoned")

    # ---- HTTP ---------------------------------------------------------------------------------
    def _error(self, status: int, message: str) -> web.Response:
        self._count("bad_requests" if status < 500 else "failed_requests")
        return web.json_response(error_body(message, "invalid_request_error" if status < 500 else "server_error"),
                                 status=status)

    async def _session(self, request: web.Request) -> Session | web.Response:
        session = self.sessions.get(request.match_info["sid"])
        if session is None:
            return self._error(404, f"no open session '{request.match_info['sid']}' (closed, or reaped after "
                                    f"agent.session_timeout_s={self.cfg.agent.session_timeout_s}s idle)")
        return session

    async def _no_session(self, request: web.Request) -> web.Response:
        return self._error(400, "requests go to a session: use base_url=<gateway>/sessions/<id>/v1 "
                                "(the episode's engine.gateway_url and the id from open_session)")

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "rayrl", "object": "model", "owned_by": "rayrl"}]})

    async def _reward(self, request: web.Request) -> web.Response:
        session = await self._session(request)
        if isinstance(session, web.Response):
            return session
        try:
            value = float((await request.json())["reward"])
            if not math.isfinite(value):
                raise ValueError
        except (ValueError, KeyError, TypeError):
            return self._error(400, "the body must be {\"reward\": <finite number>}")
        session.reward = value
        return web.json_response({"ok": True})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        session = await self._session(request)
        if isinstance(session, web.Response):
            return session
        try:
            body = check_request(await request.json())
        except json.JSONDecodeError:
            return self._error(400, "the body is not JSON")
        except BadRequest as err:
            return self._error(400, str(err))
        try:
            turn = session.plan(self.tokenizer, body["messages"], body["tools"])
        except Exception as err:  # noqa: BLE001 - e.g. a template that cannot render these messages
            return self._error(400, f"cannot apply the chat template to these messages: {err}")
        room = session.max_context - len(turn.prompt_ids)
        if room <= 0:
            return self._error(400, f"the conversation has {len(turn.prompt_ids)} tokens; the model takes {session.max_context}")
        s = session.sampling
        limit = min(s.max_new_tokens, room, body["max_tokens"] or s.max_new_tokens)
        gen = s.request(f"{session.id}/{session.turns}", turn.prompt_ids, n=1, max_new_tokens=limit)
        try:
            [sample] = await self.workers[session.worker].generate.remote([gen])
        except ray.exceptions.RayError as err:
            return self._error(503, f"generation failed on rollout-{session.worker}: {type(err).__name__}")
        parsed = parse_tool_calls(sample.text)
        if parsed.errors:
            self._count("malformed_tool_calls", len(parsed.errors))
        session.commit(turn, body["messages"], sample, assistant_message(parsed))
        self._count("turns")
        if turn.restart and session.turns > 1:
            self._count("retokenized")
        if not body["stream"]:
            return web.json_response(completion_body(body["model"], sample, parsed))
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        for chunk in stream_chunks(body["model"], sample, parsed):
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    async def stop(self) -> None:
        self.reaper.cancel()
        await self.runner.cleanup()
