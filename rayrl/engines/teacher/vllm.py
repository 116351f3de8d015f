"""A teacher on vLLM: each completion's token log-probs as vLLM's prompt log-probs of prompt + completion (one
prefill, nothing generated), at the student's sampling temperature. vLLM takes prompt log-probs from unscaled
logits, so its workers scale every logits processor by 1 / temperature once at start; the teacher is frozen and
never synced, so the scale stays. Its own asyncio loop on a daemon thread, as the rollout engine's."""

from __future__ import annotations

import asyncio
import os
import threading
import uuid

from rayrl.config import VLLMConfig
from rayrl.engines.rollout.vllm_async import EngineStartError, check_engine_inputs, engine_dtype, kv_cache_bytes
from rayrl.types import TokenScoreRequest

EXTENSION = "rayrl.engines.teacher.vllm.TeacherWorkerExtension"  # vLLM imports it by dotted path


class TeacherWorkerExtension:
    """Mixed into vLLM's workers (worker_extension_cls): the logits scale."""

    def set_logit_scale(self, scale: float) -> int:
        """Every LogitsProcessor of the model scales by `scale`; returns how many there are."""
        from vllm.model_executor.layers.logits_processor import LogitsProcessor

        found = [m for m in self.model_runner.model.modules() if isinstance(m, LogitsProcessor)]
        for m in found:
            m.scale = scale
        return len(found)


def prompt_token_logprobs(prompt_logprobs, tokens: list[int], start: int) -> list[float]:
    """The log-probs of tokens at positions start, start + 1, ... of vLLM's flat prompt log-probs (with
    prompt_logprobs=0, each position holds the given token first, then any top tokens)."""
    first = prompt_logprobs.start_indices[start:start + len(tokens)]
    got = [prompt_logprobs.token_ids[i] for i in first]
    if got != list(tokens):
        raise ValueError(f"vLLM's prompt log-probs are for other tokens than the completion's ({got[:8]}... against "
                         f"{list(tokens)[:8]}...)")
    return [prompt_logprobs.logprobs[i] for i in first]


class VLLMTeacher:
    def __init__(self, model_path: str, temperature: float, on_gpu: bool, num_threads: int, vllm: VLLMConfig) -> None:
        """vllm: the run's vllm section with the teacher's own gpu_memory_utilization (components.teacher)."""
        self.hf_config = check_engine_inputs(model_path, vllm)
        self.vllm, self.on_gpu, self.temperature = vllm, on_gpu, temperature
        self._loop = asyncio.new_event_loop()
        threading.Thread(target=self._loop.run_forever, name="vllm-teacher-loop", daemon=True).start()
        try:
            self.llm = asyncio.run_coroutine_threadsafe(self._start(model_path), self._loop).result()
        except Exception:
            self._loop.call_soon_threadsafe(self._loop.stop)
            raise

    async def _start(self, model_path: str):
        from vllm import AsyncEngineArgs
        from vllm.usage.usage_lib import UsageContext
        from vllm.v1.engine.async_llm import AsyncLLM

        os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")  # as the rollout engine: no fork under Ray
        v = self.vllm
        args = AsyncEngineArgs(
            model=model_path, skip_tokenizer_init=True, dtype=engine_dtype(v, self.hf_config),
            max_model_len=v.max_model_len, gpu_memory_utilization=v.gpu_memory_utilization,
            kv_cache_memory_bytes=kv_cache_bytes(v, self.on_gpu), enforce_eager=v.enforce_eager,
            enable_prefix_caching=False,  # prompt log-probs for every position, cached prefix or not
            worker_extension_cls=EXTENSION, disable_log_stats=True)
        try:
            llm = AsyncLLM.from_engine_args(args, usage_context=UsageContext.LLM_CLASS)
        except Exception as err:
            raise EngineStartError(f"the vLLM teacher failed to start for '{model_path}' ({type(err).__name__}: "
                                   f"{err}); see teacher.gpu_memory_utilization and the vllm section") from err
        found = await llm.collective_rpc("set_logit_scale", args=(1.0 / self.temperature,))
        if not all(found):
            raise EngineStartError(f"the vLLM teacher for '{model_path}' found no logits processor to scale by "
                                   "1 / temperature")
        return llm

    async def score(self, requests: list[TokenScoreRequest]) -> list[list[float]]:
        """Each request's completion log-probs, in order."""
        future = asyncio.run_coroutine_threadsafe(self._score_all(requests), self._loop)
        return await asyncio.wrap_future(future)

    async def _score_all(self, requests: list[TokenScoreRequest]) -> list[list[float]]:
        return list(await asyncio.gather(*(self._score_one(r) for r in requests)))

    async def _score_one(self, r: TokenScoreRequest) -> list[float]:
        from vllm import SamplingParams

        # flat: a few lists a request instead of a dict and a Logprob per position, built in this process
        params = SamplingParams(max_tokens=1, prompt_logprobs=0, detokenize=False, flat_logprobs=True)
        final = None
        async for out in self.llm.generate({"prompt_token_ids": [*r.prompt_ids, *r.completion_ids]}, params,
                                           request_id=f"teacher-{uuid.uuid4().hex[:12]}"):
            final = out
        return prompt_token_logprobs(final.prompt_logprobs, list(r.completion_ids), len(r.prompt_ids))

    def shutdown(self) -> None:
        self.llm.shutdown()
        self._loop.call_soon_threadsafe(self._loop.stop)
