"""The weight-update gate of a vLLM engine: during an update new requests wait at the gate, running ones are paused
in place (kept, not aborted) and the tokens each holds so far are marked as the old version's; at the end vLLM
resumes and the gate opens. Everything here runs on the engine's own event loop."""

from __future__ import annotations

import asyncio
import logging
import time

from rayrl.engines.rollout.vllm_versions import VersionMarks, queued_tokens

log = logging.getLogger("rayrl")
SETTLE_TICK_S = 0.01  # after a pause, outputs already produced finish arriving within a few ticks
NO_PAUSE = {"pause_engine_s": 0.0, "pause_settle_s": 0.0, "pause_queued_tokens": 0}  # an update with nothing running


class UpdateGate:
    def __init__(self, recompute_kv: bool, images: bool) -> None:
        self.recompute_kv = recompute_kv  # vllm.recompute_kv_on_sync: drop the KV of the old weights at each update
        self.images = images  # a vision-language model: vLLM's cached image embeddings are the old weights' too
        self.marks = VersionMarks()
        self.last_pause = dict(NO_PAUSE)  # the last update's pause: vLLM's part, the wait for its outputs, queued
        self._open: asyncio.Event | None = None  # cleared during an update
        self._paused = False  # the current update paused vLLM (requests were running)
        self._reset: asyncio.Future | None = None  # an idle update's prefix-cache reset, running until the release

    def start(self) -> None:
        """Made on the engine's loop, where every request passes the gate."""
        self._open = asyncio.Event()
        self._open.set()

    async def enter(self, rid: str) -> None:
        """A request waits out an update in progress (it starts on the new weights), then counts as running."""
        await self._open.wait()
        self.marks.open(rid)  # no await since the gate: an update now sees this request as running

    async def pause(self, llm, version: int) -> None:
        """Freeze vLLM's requests, then mark the tokens each holds as `version`'s: those its output handler has
        applied plus those still queued for it (a client without that queue: wait until outputs stop arriving)."""
        t0 = time.perf_counter()
        core = llm.engine_core  # its pause without pause_generation's fixed 20 ms sleep
        await core.pause_scheduler_async(mode="keep", clear_cache=self.recompute_kv)
        t1 = time.perf_counter()
        seen, m, queued = None, self.marks, queued_tokens(llm)
        while queued is None and m.running() and seen != (now := (m.finished, m.tokens_in_flight(llm))):
            seen = now
            await asyncio.sleep(SETTLE_TICK_S)
        m.mark(llm, version, queued)
        self.last_pause = {"pause_engine_s": t1 - t0, "pause_settle_s": time.perf_counter() - t1,
                           "pause_queued_tokens": sum((queued or {}).values())}

    async def hold(self, llm, version: int) -> None:
        """The start of an update: the gate shuts; vLLM is paused only when requests are running (its
        pause_generation sleeps 20 ms even when idle). With nothing running and the gate shut, no new cache block
        can be written until the release, so the prefix cache of the old weights is reset while the weights travel
        (a round trip to vLLM's engine process, awaited before the gate opens)."""
        self._open.clear()
        self._paused, self.last_pause = self.marks.running(), dict(NO_PAUSE)
        if self._paused:
            await self.pause(llm, version)  # with recompute_kv vLLM's pause clears its image embeddings too
            if self.images and not self.recompute_kv:
                await llm.reset_encoder_cache()
        elif self.recompute_kv or self.images:
            self._reset = asyncio.ensure_future(self._reset_idle(llm))

    async def _reset_idle(self, llm) -> bool:
        """With nothing running: drop the image embeddings vLLM keeps for later requests with the same image
        (measured 0.44 off in log-prob once the vision tower trained), and the prefix cache; whether it reset."""
        if self.images:
            await llm.reset_encoder_cache()
        return await llm.reset_prefix_cache() if self.recompute_kv else True

    async def release(self, llm) -> None:
        """The end of an update: resume a paused vLLM, or see its prefix cache reset; then let waiting requests in."""
        reset, self._reset = self._reset, None
        try:
            if self._paused:
                await llm.resume_generation()
            elif reset is not None and not await reset:
                log.warning("vLLM did not reset its prefix cache for a weight update; cached prompt blocks "
                            "of the previous weights may be reused")
        finally:
            self._paused = False
            self._open.set()
