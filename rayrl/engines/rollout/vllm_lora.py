"""lora.enabled on vLLM: the adapter tensors of a sync arrive in the rollout engine's own process over the run's
transport (the engine is one rank of the sync group, whatever vLLM's tensor parallelism), are written as a PEFT
adapter directory, and vLLM reloads them in place under one LoRA id. Requests carry that id, so running requests
go on with the new adapters after the update, as they do with full weights."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from pathlib import Path

from rayrl.config import LoraConfig
from rayrl.engines.registry import WEIGHT_TRANSPORTS, resolve

LORA_ID = 1  # one adapter slot, reloaded in place at every sync
LORA_NAME = "rayrl-policy"
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # the max_lora_rank values vLLM accepts


def peft_key(name: str) -> str:
    """Our parameter name as PEFT's adapter file spells it (no adapter name: lora_A.default.weight -> lora_A.weight)."""
    return name.replace(".default.weight", ".weight")


class VLLMAdapterSync:
    """The VLLMWeightSync calls (engine_args, init, start, receive, finish) for adapters; `request` is what every
    generate call passes as its lora_request (None until the first sync: B = 0, the base model)."""

    def __init__(self, transport: str, section: LoraConfig) -> None:
        self.transport_name, self.section = transport, section
        shm = Path("/dev/shm")
        self.root = Path(tempfile.mkdtemp(prefix="rayrl-lora-", dir=shm if shm.is_dir() else None))
        self.transport = None
        self.request = None
        self.last_receive: dict = {}

    def engine_args(self) -> dict:
        rank = next(r for r in VLLM_LORA_RANKS if r >= self.section.rank)  # the rule lora_rank_fits_vllm holds
        return {"enable_lora": True, "max_lora_rank": rank, "max_loras": 1}

    async def init(self, llm, group_info) -> None:
        self.transport = resolve(WEIGHT_TRANSPORTS, self.transport_name, "sync.transport")()
        await asyncio.to_thread(self.transport.init, group_info)

    async def start(self, llm) -> None:
        """Nothing to open in vLLM: the adapters are read from their directory at finish."""

    async def receive(self, llm, meta) -> None:
        if self.transport is None:
            raise RuntimeError("receive_weights before init_weight_transfer")
        await asyncio.to_thread(self._write, meta)

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

        path = str(self.root / "current")
        await llm.add_lora(LoRARequest(LORA_NAME, LORA_ID, path, load_inplace=True))
        self.request = LoRARequest(LORA_NAME, LORA_ID, path)

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
