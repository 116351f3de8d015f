"""LoRA: the learner trains only the adapters and a sync carries only them; the hf engine holding the synced
adapters scores like the learner; the merged export and the adapter directory reproduce the learner."""

import pytest
import torch

from rayrl import components
from rayrl.batching import collate
from rayrl.demo import prepare_models
from rayrl.models.lora import ADAPTER_DIR, is_adapter
from rayrl.models.policy import load_policy

LORA = ["lora.enabled=true", "lora.rank=4", "learner.lr=1e-2"]


@pytest.fixture(scope="module")
def model_path(make_cfg):
    return prepare_models(make_cfg("demo.warmup_steps=20")).policy


@pytest.fixture(scope="module")
def trained(make_cfg, model_path, random_groups):
    """A LoRA learner after two steps, and its weights before them."""
    learner = components.learner(make_cfg(*LORA), model_path)
    before = {n: p.detach().clone() for n, p in learner.backend.model.named_parameters()}
    for seed in (0, 1):
        learner.train_step(collate(random_groups(4, 4, seed), learner.tokenizer.pad_token_id))
    return learner, before


def test_only_the_adapters_train_and_sync(trained):
    learner, before = trained
    after = dict(learner.backend.model.named_parameters())
    changed = {n for n, p in after.items() if not torch.equal(p, before[n])}
    assert changed and all(is_adapter(n) for n in changed), sorted(changed)[:5]
    assert any("lora_B" in n for n in changed)  # B starts at zero: the adapters now change the outputs
    specs = learner.weight_specs()
    assert specs and all(is_adapter(name) for name, _, _ in specs)
    adapter_bytes = sum(t.numel() * t.element_size() for _, t in learner.named_full_weights())
    full_bytes = sum(p.numel() * p.element_size() for n, p in after.items() if not is_adapter(n))
    assert adapter_bytes / full_bytes <= 0.10, adapter_bytes / full_bytes  # rank 4 on the small demo model
    assert {p for g in learner.backend.optimizer.param_groups for p in g["params"]} == \
        {p for n, p in after.items() if is_adapter(n)}


def test_hf_engine_with_the_synced_adapters_scores_like_the_learner(trained, make_cfg, model_path, random_groups):
    learner, _ = trained
    engine = components.rollout_engine(make_cfg(*LORA), model_path)
    params = dict(engine.model.named_parameters())
    batch = collate(random_groups(2, 2, seed=5), learner.tokenizer.pad_token_id)
    stale = _logprobs(engine.model, batch, learner)
    with torch.no_grad():
        for name, tensor in learner.named_full_weights():  # what a sync carries, by name
            params[name].copy_(tensor)
    fresh = _logprobs(engine.model, batch, learner)
    ours = learner.compute_logprobs(batch)
    mask = batch.loss_mask > 0
    assert (fresh - ours)[mask].abs().max() <= 1e-5
    assert (stale - ours)[mask].abs().max() > 1e-3  # without the sync the engine samples another policy


def test_merged_export_and_adapter_directory_reproduce_the_learner(trained, model_path, tmp_path, random_groups):
    from peft import PeftModel

    learner, _ = trained
    learner.save(str(tmp_path))
    batch = collate(random_groups(2, 2, seed=7), learner.tokenizer.pad_token_id)
    ours = learner.compute_logprobs(batch)
    mask = batch.loss_mask > 0
    merged, _ = load_policy(tmp_path)
    assert (_logprobs(merged, batch, learner) - ours)[mask].abs().max() <= 1e-5
    base, _ = load_policy(model_path)
    adapted = PeftModel.from_pretrained(base, str(tmp_path / ADAPTER_DIR))
    assert (_logprobs(adapted, batch, learner) - ours)[mask].abs().max() <= 1e-5


def test_a_checkpoint_holds_the_adapters_and_their_optimizer_state_and_restores_them(trained, make_cfg, model_path,
                                                                                      tmp_path):
    learner, _ = trained
    learner.save(str(tmp_path))
    saved = torch.load(tmp_path / "torch_state.pt", weights_only=True)
    assert saved["model"] and all(is_adapter(k) for k in saved["model"])  # the frozen base comes from model.path
    fresh = components.learner(make_cfg(*LORA), model_path)
    fresh.load(str(tmp_path))
    ours, theirs = dict(fresh.backend.model.named_parameters()), dict(learner.backend.model.named_parameters())
    assert all(torch.equal(ours[n], theirs[n]) for n in ours)
    assert fresh.version == learner.version
    assert str(fresh.backend.optimizer.state_dict()["state"]) == str(learner.backend.optimizer.state_dict()["state"])


def test_target_modules_the_model_lacks_are_named(make_cfg, model_path):
    with pytest.raises(ValueError, match=r"lora.target_modules \['qkv_fused'\]"):
        components.learner(make_cfg(*LORA, "lora.target_modules=[qkv_fused]"), model_path)


def _logprobs(model, batch, learner):
    """Log-probs on the same scoring path, at the learner's temperature."""
    from rayrl.engines.learner.scoring import batch_logprobs

    return batch_logprobs(model.eval(), batch, learner.setup.temperature)


def test_fsdp_trains_the_same_adapters_as_one_plain_rank(trained, make_cfg, model_path, random_groups, tmp_path):
    import torch.distributed as dist

    plain, _ = trained
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    try:
        learner = components.learner(make_cfg(*LORA, "learner.backend=fsdp"), model_path)
        for seed in (0, 1):
            learner.train_step(collate(random_groups(4, 4, seed), learner.tokenizer.pad_token_id))
        ours, theirs = dict(learner.named_full_weights()), dict(plain.named_full_weights())
        assert ours.keys() == theirs.keys()
        assert max((ours[n] - theirs[n]).abs().max().item() for n in ours) <= 1e-5
        learner.save(str(tmp_path / "checkpoint"))  # the exports from FSDP2's sharded tensors
        assert (tmp_path / "checkpoint" / ADAPTER_DIR / "adapter_config.json").is_file()
        assert (tmp_path / "checkpoint" / "config.json").is_file()
        resumed = components.learner(make_cfg(*LORA, "learner.backend=fsdp"), model_path)
        resumed.load(str(tmp_path / "checkpoint"))  # the adapters from DCP, the base from model.path
        again = dict(resumed.named_full_weights())
        assert all(torch.equal(again[n], ours[n]) for n in ours)
    finally:
        dist.destroy_process_group()


def _sync_share(model, rank: int) -> float:
    """A LoRA sync's bytes over a full sync's (fp32 both), for rank-`rank` adapters on the default targets."""
    from rayrl.config import LoraConfig
    from rayrl.models.lora import add_adapters

    full = sum(p.numel() for p in model.parameters())
    with torch.device("meta"):
        wrapped = add_adapters(model, LoraConfig(enabled=True, rank=rank))
    return sum(p.numel() for n, p in wrapped.named_parameters() if is_adapter(n)) / full


def test_a_rank_16_sync_is_under_2_percent_of_a_full_one_on_the_1_5b_shape():
    from transformers import AutoModelForCausalLM, Qwen2Config

    from rayrl.testing.random_qwen2 import QWEN2_1_5B_SHAPE

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(Qwen2Config(**QWEN2_1_5B_SHAPE))
    assert _sync_share(model, 16) <= 0.02


@pytest.mark.xfail(strict=True, reason="a rank-16 adapter is r(d_in + d_out) / (d_in d_out) of its matrix: about "
                   "2r/d = 25% for the demo model's hidden size 128, and 16.1% of the whole model measured "
                   "(weight_sync.share_of_model of the LoRA learning runs); under 2% needs d >= ~1600")
def test_a_rank_16_sync_is_under_2_percent_of_a_full_one_on_the_arithmetic_model(model_path):
    model, _ = load_policy(model_path)
    assert _sync_share(model, 16) <= 0.02


@pytest.mark.parametrize("backend", ["torch", "fsdp"])
def test_a_bf16_base_trains_fp32_adapters(trained, make_cfg, model_path, random_groups, tmp_path, backend):
    import torch.distributed as dist

    plain, _ = trained
    if backend == "fsdp":
        dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    try:
        learner = components.learner(make_cfg(*LORA, "lora.base_dtype=bfloat16", f"learner.backend={backend}"),
                                     model_path)
        for seed in (0, 1):
            stats = learner.train_step(collate(random_groups(4, 4, seed), learner.tokenizer.pad_token_id))
        params = dict(learner.backend.model.named_parameters())
        assert {p.dtype for n, p in params.items() if not is_adapter(n)} == {torch.bfloat16}
        assert {p.dtype for n, p in params.items() if is_adapter(n)} == {torch.float32}
        state = learner.backend.optimizer.state_dict()["state"]
        assert state and {s["exp_avg"].dtype for s in state.values()} == {torch.float32}
        ours, theirs = dict(learner.named_full_weights()), dict(plain.named_full_weights())
        assert ours.keys() == theirs.keys() and all(t.dtype == torch.float32 for t in ours.values())
        # the same direction as over the fp32 base (Adam's first steps are about lr · sign(gradient), so the
        # gradients' small entries, which bf16's rounding flips, move as far as the large ones)
        b = [n for n in ours if "lora_B" in n]
        ours_b, theirs_b = torch.cat([ours[n].flatten() for n in b]), torch.cat([theirs[n].flatten() for n in b])
        cosine = torch.nn.functional.cosine_similarity(ours_b, theirs_b, dim=0).item()
        assert cosine >= 0.9, (cosine, stats)
    finally:
        if backend == "fsdp":
            dist.destroy_process_group()
