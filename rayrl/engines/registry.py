"""Config string -> backend class, imported only when chosen (vLLM and DeepSpeed are heavy)."""

from __future__ import annotations

import importlib

ROLLOUT_ENGINES = {
    "hf": "rayrl.engines.rollout.hf:HFRolloutEngine",
    "vllm": "rayrl.engines.rollout.vllm_async:VLLMRolloutEngine",
}
LEARNER_BACKENDS = {
    "torch": "rayrl.engines.learner.torch_backend:TorchBackend",
    "fsdp": "rayrl.engines.learner.fsdp_backend:FSDPBackend",
    "deepspeed": "rayrl.engines.learner.deepspeed_backend:DeepSpeedBackend",
}
WEIGHT_TRANSPORTS = {
    "gloo": "rayrl.engines.transport.gloo:GlooTransport",
    "nccl": "rayrl.engines.transport.nccl:NcclTransport",
    "ipc": "rayrl.engines.transport.ipc:IpcTransport",
}


def resolve(table: dict[str, str], key: str, what: str):
    """The class registered under key; a clear error lists what is registered."""
    if key not in table:
        raise ValueError(f"unknown {what} '{key}'; registered: {', '.join(sorted(table))}")
    module, name = table[key].split(":")
    return getattr(importlib.import_module(module), name)
