"""Config string -> backend class, imported only when chosen (vLLM and DeepSpeed are heavy)."""

from __future__ import annotations

import importlib

ROLLOUT_ENGINES = {
    "hf": "rayrl.engines.rollout.hf:HFRolloutEngine",
    "vllm": "rayrl.engines.rollout.vllm_async:VLLMRolloutEngine",
}
TEACHER_ENGINES = {  # teacher.engine -> its engine: score(TokenScoreRequest list) -> completion log-probs
    "hf": "rayrl.engines.teacher.hf:HFTeacher",
    "vllm": "rayrl.engines.teacher.vllm:VLLMTeacher",
}
LEARNER_BACKENDS = {
    "torch": "rayrl.engines.learner.torch_backend:TorchBackend",
    "fsdp": "rayrl.engines.learner.fsdp_backend:FSDPBackend",
    "deepspeed": "rayrl.engines.learner.deepspeed_backend:DeepSpeedBackend",
}
# sync.transport -> its TransportPlan (rayrl.engines.transport.base); a new transport is one module and one line
# here, or a plan given by import string ("package.module:NAME")
WEIGHT_TRANSPORTS = {
    "gloo": "rayrl.engines.transport.gloo:GLOO",
    "nccl": "rayrl.engines.transport.nccl:NCCL",
    "ipc": "rayrl.engines.transport.ipc:IPC",
}


def resolve(table: dict[str, str], key: str, what: str):
    """The class registered under key; a clear error lists what is registered."""
    if key not in table:
        raise ValueError(f"unknown {what} '{key}'; registered: {', '.join(sorted(table))}")
    return _import(table[key])


def _import(target: str):
    module, name = target.split(":", 1)
    return getattr(importlib.import_module(module), name)


def teacher_engine(key: str):
    """teacher.engine's class: a registered name, or module:Class."""
    if key in TEACHER_ENGINES or ":" not in key:
        return resolve(TEACHER_ENGINES, key, "teacher.engine")
    return _import(key)


def transport_plan(key: str):
    """sync.transport's TransportPlan: a registered name, or a plan by import string (module:NAME)."""
    if key in WEIGHT_TRANSPORTS or ":" not in key:
        return resolve(WEIGHT_TRANSPORTS, key, "sync.transport")
    try:
        return _import(key)
    except (ImportError, AttributeError) as err:
        raise ValueError(f"sync.transport '{key}': cannot import it ({err}); give a registered "
                         f"name ({', '.join(sorted(WEIGHT_TRANSPORTS))}) or module:NAME of a TransportPlan") from err
