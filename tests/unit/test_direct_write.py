"""The learner-name -> engine-parameter map of the direct weight write (sync.transport=ipc)."""

import pytest
import torch

from rayrl.config import ConfigError, load_config
from rayrl.engines.rollout.direct_write import DirectWriter, plan_slots
from rayrl.engines.transport.base import TensorSpec

PACKED = {"qkv_proj": ["q_proj", "k_proj", "v_proj"], "gate_up_proj": ["gate_proj", "up_proj"]}


def _learner_weights(hidden=8, kv=4, inter=12):
    g = torch.Generator().manual_seed(0)
    shapes = {"model.embed_tokens.weight": (20, hidden),
              "model.layers.0.self_attn.q_proj.weight": (hidden, hidden),
              "model.layers.0.self_attn.k_proj.weight": (kv, hidden),
              "model.layers.0.self_attn.v_proj.weight": (kv, hidden),
              "model.layers.0.self_attn.q_proj.bias": (hidden,),
              "model.layers.0.self_attn.k_proj.bias": (kv,),
              "model.layers.0.self_attn.v_proj.bias": (kv,),
              "model.layers.0.mlp.gate_proj.weight": (inter, hidden),
              "model.layers.0.mlp.up_proj.weight": (inter, hidden),
              "model.norm.weight": (hidden,)}
    return {n: torch.randn(s, generator=g) for n, s in shapes.items()}


def _engine_params(hidden=8, kv=4, inter=12):
    """vLLM's layout of the same model: q, k, v and gate, up fused along rows."""
    return {"model.embed_tokens.weight": torch.zeros(20, hidden),
            "model.layers.0.self_attn.qkv_proj.weight": torch.zeros(hidden + 2 * kv, hidden),
            "model.layers.0.self_attn.qkv_proj.bias": torch.zeros(hidden + 2 * kv),
            "model.layers.0.mlp.gate_up_proj.weight": torch.zeros(2 * inter, hidden),
            "model.norm.weight": torch.zeros(hidden)}


def _specs(weights):
    return [TensorSpec(n, tuple(t.shape), "float32") for n, t in weights.items()]


def test_fused_parameters_get_their_rows_in_order():
    weights, params = _learner_weights(), _engine_params()
    slots, why = plan_slots(_specs(weights), params, PACKED)
    assert why == "" and slots is not None
    writer = DirectWriter(slots)
    writer.write(params, weights.items())
    qkv = params["model.layers.0.self_attn.qkv_proj.weight"]
    assert torch.equal(qkv, torch.cat([weights[f"model.layers.0.self_attn.{p}_proj.weight"] for p in "qkv"]))
    assert torch.equal(params["model.layers.0.self_attn.qkv_proj.bias"],
                       torch.cat([weights[f"model.layers.0.self_attn.{p}_proj.bias"] for p in "qkv"]))
    assert torch.equal(params["model.layers.0.mlp.gate_up_proj.weight"],
                       torch.cat([weights["model.layers.0.mlp.gate_proj.weight"], weights["model.layers.0.mlp.up_proj.weight"]]))
    assert torch.equal(params["model.norm.weight"], weights["model.norm.weight"])
    params["model.norm.weight"] = torch.zeros(8)  # a parameter that moved: its rows are sliced again
    writer.write(params, {n: t * 2 for n, t in weights.items()}.items())
    assert torch.equal(params["model.norm.weight"], 2 * weights["model.norm.weight"])
    assert torch.equal(qkv[:8], 2 * weights["model.layers.0.self_attn.q_proj.weight"])


def test_a_map_that_would_not_write_everything_exactly_is_refused():
    weights = _learner_weights()
    params = _engine_params()
    params["lm_head.weight"] = torch.zeros(20, 8)  # untied head the learner does not send
    slots, why = plan_slots(_specs(weights), params, PACKED)
    assert slots is None and "lm_head.weight" in why
    sharded = _engine_params()
    sharded["model.layers.0.mlp.gate_up_proj.weight"] = torch.zeros(12, 8)  # a tensor-parallel half
    slots, why = plan_slots(_specs(weights), sharded, PACKED)
    assert slots is None and "gate_up_proj" in why
    slots, why = plan_slots(_specs(weights), _engine_params(), {})  # no fusion declared
    assert slots is None and "q_proj" in why


def test_vocabulary_padding_rows_are_zeroed_not_required():
    """vLLM pads the embedding to a multiple of 64 rows; the learner sends the real vocabulary."""
    weights, params = _learner_weights(), _engine_params()
    params["model.embed_tokens.weight"] = torch.full((64, 8), float("nan"))
    slots, why = plan_slots(_specs(weights), params, PACKED)
    assert slots is None and "embed_tokens" in why
    vocab = {"model.embed_tokens.weight": 20}
    slots, why = plan_slots(_specs(weights), params, PACKED, vocab)
    DirectWriter(slots, vocab).write(params, weights.items())
    assert torch.equal(params["model.embed_tokens.weight"][:20], weights["model.embed_tokens.weight"])
    assert torch.equal(params["model.embed_tokens.weight"][20:], torch.zeros(44, 8))


def _checked(overrides: list[str]):
    """The config, and its transport's requirements (checked by the preflight, before Ray starts)."""
    from rayrl.preflight import check_transport

    cfg = load_config(None, overrides)
    check_transport(cfg)
    return cfg


def test_colocated_config_rules():
    with pytest.raises(ConfigError, match="max_staleness=0"):
        load_config(None, ["placement.mode=colocate", "rollout.max_staleness=1"])
    with pytest.raises(ConfigError, match="sync.transport=ipc"):
        _checked(["sync.transport=ipc", "rollout.max_staleness=0"])
    with pytest.raises(ConfigError, match="offload_optimizer"):
        load_config(None, ["learner.offload_optimizer=true", "learner.backend=deepspeed"])
    colocated_gpu = ["placement.mode=colocate", "rollout.max_staleness=0", "cluster.n_gpus_per_node=2",
                     "rollout.engine=vllm", "sync.transport=ipc", "learner.backend=fsdp"]
    with pytest.raises(ConfigError, match="rollout.num_workers=1"):
        _checked(colocated_gpu + ["rollout.num_workers=2", "learner.num_workers=2"])
    cfg = load_config(None, ["placement.mode=colocate", "rollout.max_staleness=0", "cluster.n_gpus_per_node=1",
                             "rollout.engine=vllm", "sync.transport=ipc", "learner.backend=fsdp"])
    assert cfg.placement.sleep_level == 2
    recipe = load_config("recipes/gsm8k_grpo_1gpu.yaml")
    assert (recipe.placement.mode, recipe.sync.transport, recipe.rollout.max_staleness) == ("colocate", "ipc", 0)


def test_shared_gpu_config_rules():
    """placement.mode=share: both sides on one GPU at once, any η; ipc, never nccl; memory shares that fit."""
    shared = ["placement.mode=share", "cluster.n_gpus_per_node=1", "rollout.engine=vllm", "learner.backend=fsdp",
              "rollout.max_staleness=2"]
    with pytest.raises(ConfigError, match="sync.transport=ipc"):
        _checked(shared + ["sync.transport=nccl", "learner.gpu_memory_fraction=0.4", "vllm.gpu_memory_utilization=0.4"])
    with pytest.raises(ConfigError, match=r"gpu_memory_fraction \(None; unset counts as 1\)"):
        load_config(None, shared + ["sync.transport=ipc", "vllm.gpu_memory_utilization=0.4"])
    with pytest.raises(ConfigError, match=r"must be at most 1 \(got 1.10\)"):
        load_config(None, shared + ["sync.transport=ipc", "vllm.gpu_memory_utilization=0.5",
                                    "learner.gpu_memory_fraction=0.6"])
    cfg = load_config(None, shared + ["sync.transport=ipc", "vllm.gpu_memory_utilization=0.4",
                                      "learner.gpu_memory_fraction=0.55"])
    assert (cfg.placement.mode, cfg.rollout.max_staleness) == ("share", 2)
