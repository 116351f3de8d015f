"""Pure-torch rollout engine over a transformers causal LM: batched sampling with a KV cache.

Generation can be paused between tokens, so a weight update lands mid-generation and each
token records the policy version that produced it (interruptible generation, CPU edition).
Concurrent generate() calls are batched: calls made in the same event-loop turn decode together, up
to hf.max_concurrent_calls batches run at once, and calls that wait for a slot join one batch.
"""

from __future__ import annotations

import asyncio
import inspect
import threading

import torch

from rayrl.config import HFConfig
from rayrl.engines.rollout.base import EngineSetup
from rayrl.engines.registry import transport_plan
from rayrl.models.lora import add_adapters
from rayrl.models.policy import load_policy
from rayrl.models.shared_pictures import shared_pictures
from rayrl.models.vision import VisionPrompts, check_vision_model, stack_images
from rayrl.types import GenerationRequest, Sample


class _PauseGate:
    """Lets decode loops park at token boundaries while weights change."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._paused = False
        self._active = 0

    def enter(self) -> None:
        with self._cond:
            self._cond.wait_for(lambda: not self._paused)
            self._active += 1

    def leave(self) -> None:
        with self._cond:
            self._active -= 1
            self._cond.notify_all()

    def checkpoint(self) -> None:
        if self._paused:
            self.leave()
            self.enter()

    @property
    def parked(self) -> bool:
        """Paused, with every decode loop waiting at a token boundary."""
        with self._cond:
            return self._paused and self._active == 0

    def pause(self) -> None:
        with self._cond:
            self._paused = True
            self._cond.wait_for(lambda: self._active == 0)

    def resume(self) -> None:
        with self._cond:
            self._paused = False
            self._cond.notify_all()


def _sample_stream(seed: int | None, index: int) -> torch.Generator:
    """Sample `index` of a request draws from its own generator: the same seed gives the same tokens,
    whatever else shares the batch. No seed: one drawn from torch's global stream."""
    base = int(torch.randint(2**31, (1,))) if seed is None else seed
    return torch.Generator().manual_seed((base << 16) + index)


def _gumbel(streams: list[torch.Generator], vocab: int) -> torch.Tensor:
    """[rows, vocab] Gumbel noise, row b from streams[b]; argmax(log p + noise) samples from p."""
    u = torch.stack([torch.rand(vocab, generator=g) for g in streams]).clamp(1e-20, 1 - 1e-7)
    return -torch.log(-torch.log(u))


def _prepared(vision: VisionPrompts | None, config, r: GenerationRequest):
    """(prompt ids with each image placeholder expanded, image inputs or None)."""
    if vision is None:
        if r.images:
            check_vision_model(config, r.request_id)
        return list(r.prompt_ids), None
    return vision.prepare(r.prompt_ids, r.images, r.request_id)


def prompt_layout(requests: list[GenerationRequest], rows: list, vision: VisionPrompts | None, config, pad: int):
    """The rows' prompts, left-padded: (expanded prompts, ids, mask, position ids, (image kwargs, picture slots)). A
    vision-language model's rows get 3-D rotary positions (0 on padding) and their images in row order; each
    request's images are processed once for all its rows, and its patches carried once."""
    prepared = {id(r): _prepared(vision, config, r) for r in requests}
    prompts = [prepared[id(r)][0] for r, _ in rows]
    width = max(len(p) for p in prompts)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for b, p in enumerate(prompts):
        ids[b, width - len(p):] = torch.tensor(p)
        mask[b, width - len(p):] = 1
    if vision is None:
        return prompts, ids, mask, (mask.cumsum(-1) - 1).clamp(min=0), ({}, None)
    pos = torch.zeros(3, *ids.shape, dtype=torch.long)
    for b, (r, _) in enumerate(rows):
        pos[:, b, width - len(prompts[b]):] = vision.positions(*prepared[id(r)])
    return prompts, ids, mask, pos, stack_images([prepared[id(r)][1] for r, _ in rows])


class HFRolloutEngine:
    def __init__(self, model_path: str, hf: HFConfig, setup: EngineSetup, tokenizer=None) -> None:
        torch.set_num_threads(max(1, setup.num_threads))
        self.model, own_tokenizer = load_policy(model_path)
        self.tokenizer = tokenizer or own_tokenizer
        # transformers >= 5.2x names the KV cache `cache`; older 5.x releases call it `past_key_values`
        self._cache_kw = "cache" if "cache" in inspect.signature(self.model.forward).parameters else "past_key_values"
        if setup.lora is not None:  # the learner's wrapping: a sync's adapter tensors land here by name
            self.model = add_adapters(self.model, setup.lora)
        self.model.eval()
        self.vision = VisionPrompts.load(model_path, self.model.config, self.tokenizer)  # None: text only
        self._markup = torch.tensor(self.vision.tokens.markup if self.vision else [], dtype=torch.long)
        self.hf, self.setup = hf, setup
        self.version = 0
        self.sync_ranks = 1
        self.decode_steps = 0  # tokens generated per row so far, summed over calls
        self._gate = _PauseGate()
        self._transport = None
        self._asleep, self._awake_as = 0, {}  # colocated: the sleep level, and each weight's shape and device
        self.max_context = self.model.config.get_text_config().max_position_embeddings
        self._pending: list[tuple[list[GenerationRequest], asyncio.Future]] = []
        self._running, self._dispatching = 0, False

    # ---- generation -------------------------------------------------------------------
    async def generate(self, requests: list[GenerationRequest]) -> list[Sample]:
        future = asyncio.get_running_loop().create_future()
        self._pending.append((requests, future))
        if not self._dispatching:  # after the other calls of this event-loop turn are queued too
            self._dispatching = True
            asyncio.get_running_loop().call_soon(self._dispatch)
        return await future

    def _dispatch(self) -> None:
        self._dispatching = False
        if self._pending and self._running < self.hf.max_concurrent_calls:
            calls, self._pending = self._pending, []
            self._running += 1
            asyncio.ensure_future(self._decode_calls(calls))

    async def _decode_calls(self, calls: list[tuple[list[GenerationRequest], asyncio.Future]]) -> None:
        """One decode batch for several calls; each call gets its own samples (or the batch's error)."""
        try:
            samples = await asyncio.to_thread(self.generate_blocking, [r for reqs, _ in calls for r in reqs])
        except Exception as err:  # noqa: BLE001 - handed to every caller of the batch
            for _, future in calls:
                if not future.done():
                    future.set_exception(err)
        else:
            start = 0
            for reqs, future in calls:
                n = sum(r.n for r in reqs)
                if not future.done():
                    future.set_result(samples[start:start + n])
                start += n
        finally:
            self._running -= 1
            self._dispatch()

    def generate_blocking(self, requests: list[GenerationRequest]) -> list[Sample]:
        self._gate.enter()
        try:
            with torch.no_grad():
                return self._decode(requests)
        finally:
            self._gate.leave()

    def _decode(self, requests: list[GenerationRequest]) -> list[Sample]:
        rows = [(r, i) for r in requests for i in range(r.n)]
        pad, eos = self.tokenizer.pad_token_id, self.tokenizer.eos_token_id
        prompts, ids, mask, pos, (images, slots) = prompt_layout(requests, rows, self.vision, self.model.config, pad)
        temps = torch.tensor([r.temperature for r, _ in rows])
        greedy = temps == 0
        divisor = torch.where(greedy, 1.0, temps).unsqueeze(1)  # greedy rows report T=1 log-probs
        max_new = max(r.max_new_tokens for r, _ in rows)
        limits = torch.tensor([r.max_new_tokens for r, _ in rows])
        stops_at_eos = torch.tensor([not r.ignore_eos for r, _ in rows])
        streams = [_sample_stream(r.seed, i) for r, i in rows]
        out_tokens, out_logp, out_ver = [], [], []
        done = torch.zeros(len(rows), dtype=torch.bool)
        next_pos = pos.reshape(-1, *ids.shape).amax((0, 2)) + 1  # [rows]: where each row's first new token sits
        with shared_pictures(self.model, slots):  # a request's samples: its pictures through the tower once
            step_out = self.model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, **images)
        for t in range(max_new):
            logits = step_out.logits[:, -1].float()
            logp = torch.log_softmax(logits / divisor, -1)
            sampled = (logp + _gumbel(streams, logp.shape[1])).argmax(-1)  # a draw from softmax(logits / T)
            tok = torch.where(greedy, logits.argmax(-1), sampled)
            tok = torch.where(done, torch.full_like(tok, pad), tok)
            out_tokens.append(tok)
            out_logp.append(logp.gather(1, tok.unsqueeze(1)).squeeze(1))
            out_ver.append(self.version)
            done |= ((tok == eos) & stops_at_eos) | (t + 1 >= limits) | torch.isin(tok, self._markup)
            self.decode_steps += 1
            if bool(done.all()):
                break
            self._gate.checkpoint()  # a weight update may happen here; later tokens get the new version
            mask = torch.cat([mask, torch.ones(len(rows), 1, dtype=mask.dtype)], 1)
            step = (next_pos + t)[:, None]
            step_out = self.model(input_ids=tok.unsqueeze(1), attention_mask=mask,
                                  position_ids=step if self.vision is None else step.expand(3, -1, -1),
                                  use_cache=True, **{self._cache_kw: step_out[self._cache_kw]})
        return self._to_samples(rows, prompts, torch.stack(out_tokens, 1), torch.stack(out_logp, 1), out_ver, eos)

    def _to_samples(self, rows, prompts, tokens, logps, versions, eos) -> list[Sample]:
        samples, markup = [], set(self._markup.tolist())
        for b, (r, _) in enumerate(rows):
            toks = tokens[b].tolist()
            stop = eos in toks and not r.ignore_eos
            n = toks.index(eos) + 1 if stop else min(len(toks), r.max_new_tokens)
            cut = next((i for i, t in enumerate(toks[:n]) if t in markup), None)  # image markup: never a completion's
            n, reason = (cut, "markup") if cut is not None else (n, "stop" if stop else "length")
            comp = toks[:n]
            samples.append(Sample(
                request_id=r.request_id, prompt_ids=prompts[b], completion_ids=comp,
                logprobs=logps[b, :n].tolist(), versions=versions[:n],
                finish_reason=reason,
                text=self.tokenizer.decode(comp, skip_special_tokens=True),
            ))
        return samples

    # ---- control (blocking work runs on a thread; generation keeps its own) ------------
    async def pause(self) -> None:
        await asyncio.to_thread(self._gate.pause)

    async def resume(self) -> None:
        self._gate.resume()

    async def init_weight_transfer(self, group_info) -> None:
        self._transport = transport_plan(self.setup.transport).receiver()
        await asyncio.to_thread(self._transport.init, group_info)

    async def sleep(self, level: int) -> None:
        """Colocated: level 1 moves the weights to host memory (nothing to do on CPU), level 2 frees them
        (the next sync writes every one). Decoding holds no cache between calls."""
        self._asleep = level
        with torch.no_grad():
            for p in self.model.parameters():
                self._awake_as[p] = (p.shape, p.device)
                p.data = p.data.to("cpu") if level == 1 else torch.empty(0, dtype=p.dtype, device=p.device)
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    def _wake(self) -> None:
        with torch.no_grad():
            for p, (shape, device) in self._awake_as.items():
                p.data = p.data.to(device) if self._asleep == 1 else torch.empty(shape, dtype=p.dtype, device=device)
        self._awake_as.clear()

    async def begin_weight_update(self) -> None:
        if self._asleep:  # nothing is decoding: the worker drained before it slept
            self._wake()
            return
        await self.pause()

    async def receive_weights(self, meta) -> None:
        if self._transport is None:
            raise RuntimeError("receive_weights before init_weight_transfer")
        await asyncio.to_thread(self._load, meta)

    def _load(self, meta) -> None:
        params = dict(self.model.named_parameters())
        with torch.no_grad():
            for name, tensor in self._transport.receive(meta):
                if name not in params:
                    raise KeyError(f"weight '{name}' from the learner is not a parameter of the rollout model")
                params[name].copy_(tensor)
        if torch.cuda.is_available() and torch.cuda.is_initialized():  # ipc: done reading the learner's tensors
            torch.cuda.synchronize()  # before it may change them (in place: its next step)

    async def end_weight_update(self, version: int) -> None:
        self.version = version
        if self._asleep:
            self._asleep = 0
            return
        await self.resume()

    def stats(self) -> dict:
        """This engine runs every request to its end (no timeouts); a decode step is one token per row."""
        return {"aborted": 0, "timed_out": 0, "tokens_generated": self.decode_steps}

    def shutdown(self) -> None:
        pass
