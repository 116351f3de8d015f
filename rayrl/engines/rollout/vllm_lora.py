"""lora.enabled on vLLM: the first sync's adapters are written as a PEFT adapter directory that vLLM loads under one
LoRA id; after it (lora.vllm_sync=in_place) each sync's adapters go straight into that adapter's slot in vLLM's
LoRA buffers (sync.transport=ipc: the worker opens the learner's buckets; otherwise they arrive in the engine's
process, the engine being one rank of the sync group, and reach the worker through vLLM's RPC); with reload,
every sync writes the directory and vLLM reloads it in place. Requests carry that id, so running requests go on
with the new adapters after the update, as they do with full weights."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from pathlib import Path

from rayrl.config import LoraConfig
from rayrl.engines.rollout.vllm_lora_slots import LORA_ID
from rayrl.engines.transport.base import TransportPlan

LORA_NAME = "rayrl-policy"
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # the max_lora_rank values vLLM accepts


def peft_key(name: str) -> str:
    """Our parameter name as PEFT's adapter file spells it (no adapter name: lora_A.default.weight -> lora_A.weight)."""
    return name.replace(".default.weight", ".weight")


class VLLMAdapterSync:
    """A vLLM receiver's calls (engine_args, init, start, receive, finish) for adapters over any transport with an
    engine-process end; `request` is what every generate call passes as its lora_request (None until the first
    sync: B = 0, the base model)."""

    def __init__(self, plan: TransportPlan, section: LoraConfig) -> None:
        self.plan, self.section = plan, section
        self.vllm_side = plan.vllm_receiver(False)  # the transport's worker extension and its way into the slot
        shm = Path("/dev/shm")
        self.root = Path(tempfile.mkdtemp(prefix="rayrl-lora-", dir=shm if shm.is_dir() else None))
        self.transport = None
        self.request = None
        self.last_receive: dict = {}  # which path the last sync took (lora_in_place, lora_reload) and its seconds
        self.started = 0.0

    def engine_args(self) -> dict:
        rank = next(r for r in VLLM_LORA_RANKS if r >= self.section.rank)  # the rule lora_rank_fits_vllm holds
        return {"enable_lora": True, "max_lora_rank": rank, "max_loras": 1, **self.vllm_side.engine_args()}

    async def init(self, llm, group_info) -> None:
        self.transport = self.plan.receiver()  # a transport without one is refused by its requirements
        await asyncio.to_thread(self.transport.init, group_info)

    async def recheck(self, llm) -> None:
        """Nothing to read again: bitwise mode syncs full weights."""

    async def start(self, llm) -> None:
        """Nothing to open in vLLM: the adapters go to its LoRA slot at receive, or are reloaded at finish."""

    async def receive(self, llm, meta) -> None:
        if self.transport is None:
            raise RuntimeError("receive_weights before init_weight_transfer")
        self.started = time.perf_counter()
        if self.request is None or self.section.vllm_sync == "reload":
            await asyncio.to_thread(self._write, meta)
            self.last_receive = {"path": "lora_reload"}
            return
        scaling = self.section.alpha / self.section.rank
        self.last_receive = await self.vllm_side.write_adapters(llm, self.transport, meta, scaling)

    def _write(self, meta) -> None:
        """The adapters as PEFT's directory: adapter_config.json and adapter_model.safetensors."""
        from peft import LoraConfig as PeftLoraConfig
        from safetensors.torch import save_file

        tensors = {peft_key(n): t.detach().to("cpu", copy=True).contiguous() for n, t in self.transport.receive(meta)}
        s = self.section
        fresh = self.root / "next"
        shutil.rmtree(fresh, ignore_errors=True)
        PeftLoraConfig(r=s.rank, lora_alpha=s.alpha, lora_dropout=s.dropout, target_modules=list(s.target_modules),
                       bias="none", task_type="CAUSAL_LM").save_pretrained(str(fresh))
        save_file(tensors, str(fresh / "adapter_model.safetensors"))
        shutil.rmtree(self.root / "current", ignore_errors=True)
        fresh.rename(self.root / "current")

    async def finish(self, llm, version: int) -> None:
        from vllm.lora.request import LoRARequest

        if self.last_receive.get("path") == "lora_reload":
            path = str(self.root / "current")
            await llm.add_lora(LoRARequest(LORA_NAME, LORA_ID, path, load_inplace=True))
            self.request = LoRARequest(LORA_NAME, LORA_ID, path)
        self.last_receive["seconds"] = time.perf_counter() - self.started

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
