"""Rollout engine over vLLM's AsyncLLM: concurrent requests, per-token policy versions,
timeouts that abort and keep partial tokens, and interruptible weight updates
(pause with in-flight requests kept -> receive weights -> resume on the new weights).

AsyncLLM lives on an event loop of its own (a daemon thread), so callers on any loop or
thread (Ray's concurrency groups each have one) can drive it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import threading
import uuid
from pathlib import Path

from rayrl.config import VLLMConfig
from rayrl.engines.rollout.base import EngineSetup
from rayrl.engines.rollout.vllm_modes import FullWeights, engine_mode
from rayrl.engines.rollout.vllm_images import VLLMImages, engine_prompt, multimodal_args, sample_prompt_ids
from rayrl.engines.rollout.vllm_update_gate import SETTLE_TICK_S, UpdateGate
from rayrl.engines.rollout.vllm_versions import completion_versions, final_output
from rayrl.types import GenerationRequest, Sample

log = logging.getLogger("rayrl")
SHUTDOWN_TICKS = 100  # at shutdown, aborted requests' callers get their partial samples within this many ticks


class EngineStartError(RuntimeError):
    """vLLM could not start; the message names the cause and the config knob to change."""


def check_engine_inputs(model_path: str, vllm: VLLMConfig) -> dict:
    """Fail before starting vLLM on a bad model path or an impossible max_model_len; returns config.json."""
    config_file = Path(model_path) / "config.json"
    if not config_file.is_file():
        raise EngineStartError(f"model.path '{model_path}' has no config.json; "
                               "give a local Hugging Face model directory")
    hf_config = json.loads(config_file.read_text())
    limit = hf_config.get("max_position_embeddings")
    want = vllm.max_model_len
    if want is not None and limit is not None and want > limit:
        raise EngineStartError(f"vllm.max_model_len={want} exceeds the model's max_position_embeddings={limit}; "
                               f"set vllm.max_model_len <= {limit} or leave it unset")
    return hf_config


def engine_dtype(vllm: VLLMConfig, hf_config: dict) -> str:
    """vllm.dtype, with "auto" meaning the checkpoint's own dtype (vLLM on CPU would downcast fp32 to bf16)."""
    if vllm.dtype != "auto":
        return vllm.dtype
    return hf_config.get("dtype") or hf_config.get("torch_dtype") or "auto"


def kv_cache_bytes(v: VLLMConfig, on_gpu: bool) -> int | None:
    """vllm.kv_cache_gb in bytes; on a CPU-only cluster vllm.cpu_kv_cache_gb when it is unset; None: vLLM sizes it."""
    gb = v.kv_cache_gb if v.kv_cache_gb is not None or on_gpu else v.cpu_kv_cache_gb
    return None if gb is None else int(gb * 2**30)


def head_overrides(lm_head_fp32: bool) -> dict:
    """vLLM's hf_overrides for vllm.lm_head_fp32 ({} when off: vLLM rejects None)."""
    return {"head_dtype": "float32"} if lm_head_fp32 else {}


def engine_args(v: VLLMConfig, setup: EngineSetup, model_path: str, hf_config: dict, mode: FullWeights):
    """vLLM's AsyncEngineArgs for this config: one place that maps vllm.* keys to vLLM's names; the mode adds its
    own (the transport's receiver, bitwise kernels and pages, LoRA slots), a vision-language model its limits."""
    from vllm import AsyncEngineArgs

    return AsyncEngineArgs(
        model=model_path, dtype=engine_dtype(v, hf_config), load_format=v.load_format,
        max_model_len=v.max_model_len, gpu_memory_utilization=v.gpu_memory_utilization,
        kv_cache_memory_bytes=kv_cache_bytes(v, setup.on_gpu),
        tensor_parallel_size=v.tensor_parallel_size,
        distributed_executor_backend="ray" if v.tensor_parallel_size > 1 else None,
        enforce_eager=v.enforce_eager, enable_prefix_caching=v.enable_prefix_caching,
        logprobs_mode="processed_logprobs",  # behaviour log-probs at the sampling temperature
        max_num_seqs=v.max_num_seqs, max_num_batched_tokens=v.max_num_batched_tokens,
        hf_overrides=head_overrides(v.lm_head_fp32), enable_sleep_mode=setup.sleeps,
        seed=setup.seed, disable_log_stats=True, **multimodal_args(v, hf_config), **mode.engine_args(v))


def sampled_logprobs(logprobs, tokens: list[int]) -> list[float]:
    """The sampled tokens' log-probs from vLLM's flat_logprobs lists (with logprobs=0 a position holds the sampled
    token's alone), or from its list of per-token dicts."""
    if logprobs is None:
        return []
    if hasattr(logprobs, "start_indices"):  # FlatLogprobs
        return [logprobs.logprobs[i] for i in logprobs.start_indices[:len(tokens)]]
    return [lp[t].logprob for lp, t in zip(logprobs, tokens)]


def request_samples(r: GenerationRequest, final, marks: list, version: int, tokenizer,
                    images: VLLMImages) -> list[Sample]:
    """One sample per completion of the request's final output (an aborted one: empty, finish_reason "abort"),
    its tokens' versions from the marks of the weight updates it ran through."""
    by_index = {c.index: c for c in (final.outputs if final is not None else [])}
    prompt_ids = sample_prompt_ids(r, final)
    samples = []
    for i in range(r.n):
        c = by_index.get(i)
        tokens, logprobs, reason = images.cut(
            list(c.token_ids) if c is not None else [], sampled_logprobs(c.logprobs, c.token_ids) if c is not None
            else [], c.finish_reason if c is not None and c.finish_reason else "abort")
        samples.append(Sample(
            request_id=r.request_id, prompt_ids=list(prompt_ids), completion_ids=tokens, logprobs=logprobs,
            versions=completion_versions(len(tokens), marks, i, version), finish_reason=reason,
            text=tokenizer.decode(tokens, skip_special_tokens=True)))
    return samples


class VLLMRolloutEngine:
    def __init__(self, model_path: str, vllm: VLLMConfig, setup: EngineSetup, tokenizer) -> None:
        self.hf_config = hf_config = check_engine_inputs(model_path, vllm)
        self.images = VLLMImages(hf_config)  # a vision-language model's image markup
        self.max_context = vllm.max_model_len or hf_config.get("max_position_embeddings") or 0  # prompt + completion
        self.vllm, self.setup, self.tokenizer = vllm, setup, tokenizer
        self.version = 0
        self.asleep = False  # colocated: sleeping while the learner trains, until the next weight update
        self._closed = False  # shutdown ran: vLLM and this engine's loop are stopped
        self.mode = engine_mode(setup, vllm)  # full weights, bitwise or LoRA: the receiver and its engine arguments
        self.sync_ranks = self.mode.sync_ranks  # ranks this engine adds to the weight-sync group
        self._weights = self.mode.weights
        self.counts = {"aborted": 0, "timed_out": 0, "tokens_done": 0}
        self.gate = UpdateGate(vllm.recompute_kv_on_sync, bool(self.images.markup))  # pause, marks, release of updates
        self._loop = asyncio.new_event_loop()
        threading.Thread(target=self._loop.run_forever, name="vllm-engine-loop", daemon=True).start()
        try:
            self.llm = self._on_loop_blocking(self._start(model_path))
        except Exception:
            self._loop.call_soon_threadsafe(self._loop.stop)
            raise

    # ---- the engine's own loop --------------------------------------------------------
    def _on_loop_blocking(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    async def _on_loop(self, coro):
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self._loop))

    async def _start(self, model_path: str):
        from vllm.usage.usage_lib import UsageContext
        from vllm.v1.engine.async_llm import AsyncLLM

        # vLLM forks its engine process unless told otherwise (it does inside Ray actors); forking a
        # process that runs Ray's threads (a driver, a test) deadlocks at engine start
        os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
        os.environ.update(self.mode.environment())  # vLLM's switches for the mode; its engine process inherits them
        # the output handler applies each engine step's outputs whole (it would yield every 128 requests), so a
        # weight update finds every output either applied or still queued: exact token counts without a drain
        os.environ["VLLM_V1_OUTPUT_PROC_CHUNK_SIZE"] = str(2**30)
        self.gate.start()
        args = engine_args(self.vllm, self.setup, model_path, self.hf_config, self.mode)
        try:
            # LLM_CLASS: vLLM's batch-throughput defaults (on a large GPU 1024 sequences, 16384 tokens per step);
            # the default context sizes the engine for serving (128 sequences, 2048 tokens)
            return AsyncLLM.from_engine_args(args, usage_context=UsageContext.LLM_CLASS)
        except Exception as err:  # vLLM reports the root cause in its log; name the knobs here
            kv = "vllm.kv_cache_gb" if self.setup.on_gpu else "vllm.cpu_kv_cache_gb"
            raise EngineStartError(
                f"vLLM failed to start for '{model_path}' ({type(err).__name__}: {err}). If the log above shows "
                f"out-of-memory or too few KV-cache blocks: lower vllm.max_model_len, change {kv} or "
                "vllm.gpu_memory_utilization, or raise vllm.tensor_parallel_size"
            ) from err

    # ---- generation -------------------------------------------------------------------
    async def generate(self, requests: list[GenerationRequest]) -> list[Sample]:
        if self._closed:  # its loop no longer runs: the call would never return
            raise RuntimeError("this vLLM rollout engine was shut down; it generates nothing more")
        return await self._on_loop(self._generate_all(requests))

    async def _generate_all(self, requests: list[GenerationRequest]) -> list[Sample]:
        parts = await asyncio.gather(*(self._generate_one(r) for r in requests))
        return [s for part in parts for s in part]

    async def _generate_one(self, r: GenerationRequest) -> list[Sample]:
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        # FINAL_ONLY, as LLM.generate does: streaming every token to Python costs ~25% throughput.
        # Per-token versions come from the token counts recorded at each weight update (VersionMarks).
        # flat_logprobs: a few flat lists per request instead of a dict and an object per token (the client's
        # per-step work, and the garbage collector's, grow with both)
        params = SamplingParams(n=r.n, max_tokens=r.max_new_tokens, temperature=r.temperature, logprobs=0, seed=r.seed,
                                ignore_eos=r.ignore_eos, detokenize=False, flat_logprobs=True,
                                output_kind=RequestOutputKind.FINAL_ONLY,
                                stop_token_ids=[*([] if r.ignore_eos else [self.tokenizer.eos_token_id]),
                                                *self.images.markup])
        rid = f"{r.request_id}-{uuid.uuid4().hex[:8]}"
        await self.gate.enter(rid)  # a weight update in progress: start on the new weights
        timed_out = []
        timeout = self.setup.request_timeout_s if r.timeout_s is None else r.timeout_s
        timer = self._loop.call_later(timeout, self._expire, rid, timed_out)
        try:
            final = await final_output(self.llm, rid, engine_prompt(r), params, self._weights.request, self.gate.marks)
        finally:
            timer.cancel()
            marks = self.gate.marks.close(rid)
        samples = request_samples(r, final, marks, self.version, self.tokenizer, self.images)
        self.counts["aborted"] += sum(s.finish_reason == "abort" for s in samples)
        self.counts["timed_out"] += len(timed_out) * r.n
        self.counts["tokens_done"] += sum(len(s.completion_ids) for s in samples)
        return samples

    def _expire(self, rid: str, timed_out: list) -> None:
        timed_out.append(rid)
        self._loop.create_task(self.llm.abort(rid))

    # ---- control ----------------------------------------------------------------------
    async def pause(self) -> None:
        await self._on_loop(self._pause())

    async def _pause(self) -> None:
        await self.gate.pause(self.llm, self.version)

    def stats(self) -> dict:
        """Counters plus tokens generated so far, in-flight requests included."""
        # vLLM's request states live on the loop; after shutdown neither runs
        in_flight = 0 if self._closed else self._on_loop_blocking(self._tokens_in_flight())
        return {**self.counts, "untracked_at_update": self.gate.marks.untracked,
                "tokens_generated": self.counts["tokens_done"] + in_flight}

    async def _tokens_in_flight(self) -> int:
        return self.gate.marks.tokens_in_flight(self.llm)

    async def resume(self) -> None:
        await self._on_loop(self.llm.resume_generation())

    async def init_weight_transfer(self, group_info) -> None:
        await self._on_loop(self._weights.init(self.llm, group_info))

    async def sleep(self, level: int) -> None:
        """Give the GPU to the learner: weights to host (1) or dropped (2), KV cache dropped. Nothing may
        be in flight (the rollout worker drains first). On CPU there is nothing to give back."""
        if self.setup.sleeps:
            await self._on_loop(self.llm.sleep(level))
            self.asleep = True

    # each part of a weight update is one coroutine on the engine's loop: a hop between threads costs a wait for the
    # GIL, long while the loop is busy applying outputs
    async def begin_weight_update(self) -> None:
        await self._on_loop(self._begin())

    async def _begin(self) -> None:
        if self.asleep:  # only the weights come back before the sync; the KV cache after it
            await self.llm.wake_up(tags=["weights"])
        else:
            await self.gate.hold(self.llm, self.version)
        await self._weights.start(self.llm)

    async def receive_weights(self, meta) -> None:
        await self._on_loop(self._weights.receive(self.llm, meta))

    async def end_weight_update(self, version: int) -> None:
        await self._on_loop(self._end(version))

    async def _end(self, version: int) -> None:
        await self._weights.finish(self.llm, version)
        self.version = version
        if self.asleep:
            await self.llm.wake_up(tags=["kv_cache"])
            self.asleep = False
        else:
            await self.gate.release(self.llm)
        await self._weights.recheck(self.llm)  # bitwise mode: what the sync wrote, read again where checkable

    async def _stop_requests(self) -> None:
        """Abort the running requests and let their callers take the partial samples (counted as aborted); then
        stop vLLM's output handler."""
        running = list(self.gate.marks.marks)
        if running:
            log.info("vLLM shutting down: aborting %d running requests", len(running))
            await self.llm.abort(running)
            for _ in range(SHUTDOWN_TICKS):  # each request's generator ends at the abort's final output
                if not self.gate.marks.running():
                    break
                await asyncio.sleep(SETTLE_TICK_S)
        handler = getattr(self.llm, "output_handler", None)  # AsyncLLM's task; started by its first request
        if handler is not None and not handler.done():
            handler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await handler

    @property
    def last_pause(self) -> dict:
        """The last weight update's pause: vLLM's part, the wait for its outputs, the tokens still queued."""
        return self.gate.last_pause

    def last_receive(self) -> dict:
        """ipc: how the last sync wrote the weights (direct or load_weights) and how long it took there."""
        return dict(self._weights.last_receive)

    def shutdown(self) -> None:
        """Stop vLLM (once; later calls do nothing). Requests still running end as aborted, and its output handler
        stops before its engine process: in vLLM's own order the handler sees the process gone and logs
        EngineDeadError."""
        if self._closed:
            return
        self._closed = True
        try:
            self._on_loop_blocking(self._stop_requests())
        except Exception as err:  # an engine process already gone: nothing left to stop, vLLM's shutdown still runs
            log.warning("vLLM shutdown: could not stop running requests first (%s: %s)", type(err).__name__, err)
        self.llm.shutdown()
        self._weights.close()
        self._loop.call_soon_threadsafe(self._loop.stop)
