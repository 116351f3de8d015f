"""The hf rollout engine against the learner's log-probs, and interruption between tokens (no Ray)."""

import asyncio
import threading
import time

import pytest
import torch

from rayrl.batching import collate
from rayrl.engines.learner.scoring import token_logprobs
from rayrl.data import PromptTemplate, split
from rayrl import components
from rayrl.engines.transport.base import TensorSpec, pack, plan_buckets, unpack
from rayrl.demo import prepare_models
from rayrl.models.policy import load_policy
from rayrl.types import GenerationRequest, TrajectoryGroup


@pytest.fixture(scope="module")
def setup(make_cfg):
    cfg = make_cfg("demo.warmup_steps=30")
    path = prepare_models(cfg).policy
    engine = components.rollout_engine(cfg, path)
    train, _ = split(cfg.data)
    return cfg, path, engine, PromptTemplate(engine.tokenizer), train


def test_model_is_cached_and_offline(setup, make_cfg):
    cfg, path, *_ = setup
    assert prepare_models(make_cfg("demo.warmup_steps=30")).policy == path  # same hash, no rebuild
    model, tok = load_policy(path)
    assert model.config.head_dim == 64 and model.config.model_type == "qwen2"
    assert tok.decode(tok.encode("12+7=", add_special_tokens=False)) == "12+7="


def test_rollout_logprobs_equal_learner_logprobs(setup):
    cfg, path, engine, template, train = setup
    tasks = train[:6]
    reqs = [GenerationRequest(t.id, template.encode(t), 3, 6, 1.0) for t in tasks]
    samples = engine.generate_blocking(reqs)
    assert len(samples) == 18 and all(len(s.logprobs) == len(s.completion_ids) >= 1 for s in samples)
    groups = [TrajectoryGroup(t, samples[3 * i: 3 * i + 3]) for i, t in enumerate(tasks)]
    batch = collate(groups, template.tokenizer.pad_token_id)
    learner_model, _ = load_policy(path)
    with torch.no_grad():
        lp = token_logprobs(learner_model, batch.input_ids, batch.attention_mask, 1.0)
    diff = ((lp - batch.behav_logprobs) * batch.loss_mask).abs().max().item()
    assert diff <= 1e-5
    assert batch.loss_mask.sum().item() == sum(len(s.completion_ids) for s in samples)


def test_greedy_is_deterministic(setup):
    _, _, engine, template, train = setup
    reqs = [GenerationRequest(t.id, template.encode(t), 1, 6, 0.0) for t in train[:8]]
    a = [s.completion_ids for s in engine.generate_blocking(reqs)]
    b = [s.completion_ids for s in engine.generate_blocking(reqs)]
    assert a == b


def test_pause_mid_generation_tags_two_versions(setup):
    _, _, engine, template, train = setup
    req = GenerationRequest("long", template.encode(train[0]), 1, 120, 1.0, ignore_eos=True)
    result = {}
    start = engine.decode_steps
    worker = threading.Thread(target=lambda: result.update(s=engine.generate_blocking([req])[0]))
    worker.start()
    while engine.decode_steps < start + 5:
        time.sleep(0.001)
    asyncio.run(engine.begin_weight_update())  # returns once the decode loop is parked at a token boundary
    parked_at = engine.decode_steps
    assert engine._gate.parked  # the decode loop waits at the gate: it cannot take another step
    assert engine.decode_steps == parked_at
    asyncio.run(engine.end_weight_update(engine.version + 1))
    worker.join(timeout=60)
    versions = result["s"].versions
    assert len(versions) == 120 and result["s"].finish_reason == "length"
    assert versions[0] == engine.version - 1 and versions[-1] == engine.version
    assert versions == sorted(versions)


def test_bucket_plan_pack_roundtrip():
    tensors = {"a": torch.randn(3, 4), "b": torch.arange(5, dtype=torch.int64), "c": torch.randn(100)}
    specs = [TensorSpec(n, tuple(t.shape), str(t.dtype).removeprefix("torch.")) for n, t in tensors.items()]
    plan = plan_buckets(specs, bucket_bytes=100)
    assert [[s.name for s in b] for b in plan.buckets] == [["a", "b"], ["c"]]
    assert plan.n_bytes == 48 + 40 + 400
    for bucket in plan.buckets:
        buf = pack([tensors[s.name] for s in bucket])
        for name, t in unpack(buf, bucket):
            assert torch.equal(t, tensors[name])


def test_token_versions_from_update_boundaries():
    from rayrl.engines.rollout.vllm_versions import token_versions

    assert token_versions(5, [], 3) == [3] * 5
    assert token_versions(5, [(2, 0)], 1) == [0, 0, 1, 1, 1]
    assert token_versions(6, [(1, 0), (4, 1)], 2) == [0, 1, 1, 1, 2, 2]
    assert token_versions(3, [(0, 0)], 1) == [1, 1, 1]  # queued during the update: all new
    assert token_versions(2, [(2, 4)], 5) == [4, 4]  # finished before the update


def test_vllm_engine_inputs_are_checked_before_start(tmp_path, setup):
    from rayrl.engines.rollout.vllm_async import EngineStartError, check_engine_inputs, engine_dtype

    cfg, path, _, _, _ = setup
    with pytest.raises(EngineStartError, match="model.path"):
        check_engine_inputs(str(tmp_path), cfg.vllm)
    too_long = cfg.model_copy(update={"vllm": cfg.vllm.model_copy(update={"max_model_len": 100_000})})
    with pytest.raises(EngineStartError, match=r"vllm.max_model_len=100000 exceeds .* 256"):
        check_engine_inputs(str(path), too_long.vllm)
    assert engine_dtype(cfg.vllm, check_engine_inputs(str(path), cfg.vllm)) == "float32"  # auto: the checkpoint's


@pytest.mark.parametrize("fp32_head", [False, True])
def test_vllm_engine_args_pass_vllm_own_validation(setup, fp32_head):
    """vLLM builds its model config from our engine args; vllm.lm_head_fp32 reaches it as head_dtype."""
    from rayrl.engines.rollout.vllm_async import engine_args
    from rayrl.engines.rollout.vllm_modes import engine_mode

    cfg, path, *_ = setup
    cfg = cfg.model_copy(update={"vllm": cfg.vllm.model_copy(update={"lm_head_fp32": fp32_head})})
    setup = components.engine_setup(cfg)
    model_config = engine_args(cfg.vllm, setup, path, {"dtype": "bfloat16"}, engine_mode(setup, cfg.vllm)).create_model_config()
    assert model_config.dtype == torch.bfloat16
    assert model_config.head_dtype == (torch.float32 if fp32_head else torch.bfloat16)


def test_sampled_logprobs_read_from_flat_lists_and_from_dicts():
    """vLLM's flat log-prob lists (what the rollout engine asks for) and its per-token dicts give the same
    sampled log-probs; a completion cut short reads only its own tokens."""
    from vllm.logprobs import FlatLogprobs, Logprob

    from rayrl.engines.rollout.vllm_async import sampled_logprobs

    tokens, values = [7, 3, 9], [-0.5, -1.25, -2.0]
    per_token = [{t: Logprob(v, rank=1)} for t, v in zip(tokens, values)]
    flat = FlatLogprobs()
    flat.extend(per_token)
    assert sampled_logprobs(flat, tokens) == values == sampled_logprobs(per_token, tokens)
    assert sampled_logprobs(flat, tokens[:2]) == values[:2]
    assert sampled_logprobs(None, tokens) == []
