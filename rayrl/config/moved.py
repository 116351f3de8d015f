"""Keys that moved to another section or name: a config that still uses one is refused with the new place,
rather than with 'unknown key' (CHANGELOG.md lists when each moved)."""

from __future__ import annotations

from rayrl.config.files import ConfigError, invalid

_VLLM_KEYS = ("tensor_parallel_size", "max_model_len", "gpu_memory_utilization", "kv_cache_gb", "cpu_kv_cache_gb",
              "dtype", "load_format", "enforce_eager", "max_num_seqs", "max_num_batched_tokens",
              "enable_prefix_caching", "recompute_kv_on_sync", "kv_block_size")

MOVED_KEYS: dict[str, str] = {
    "model.backend": "rollout.engine",
    "model.cache_dir": "demo.cache_dir",
    "model.lm_head_fp32": "vllm.lm_head_fp32",
    "rollout.max_concurrent_calls": "hf.max_concurrent_calls",
    "rollout.eval_temperature": "eval.temperature",
    "rollout.eval_samples_per_task": "eval.samples_per_task",
    "metrics.eval_every_steps": "eval.every_steps",
    "algorithm.eps": "algorithm.advantage_std_eps",
    **{f"rollout.{k}": f"vllm.{k}" for k in _VLLM_KEYS},
}
MOVED_SECTIONS: dict[str, str] = {"model.build": "demo"}  # every key of the section, same name


def _paths(tree: dict, prefix: str = ""):
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            yield from _paths(value, f"{path}.")
        else:
            yield path


def new_place(key: str) -> str | None:
    """Where a moved key lives now; None if it did not move."""
    if key in MOVED_KEYS:
        return MOVED_KEYS[key]
    for old, new in MOVED_SECTIONS.items():
        if key == old or key.startswith(old + "."):
            return new + key[len(old):]
    return None


def check_moved(tree: dict) -> None:
    """Raise naming every moved key the tree still uses and where it lives now."""
    moved = [(k, new) for k in _paths(tree) if (new := new_place(k))]
    if moved:
        raise ConfigError(invalid([f"'{k}' moved to '{new}'" for k, new in moved]))
