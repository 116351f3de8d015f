"""Images in a task: normalised and checked with one message per bad input, expanded into the prompt the way the
model counts them, and a tiny Qwen2-VL whose generation log-probs equal its full forward's with an image in
context (the basis of rollout-learner exactness)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from transformers import Qwen2Config, Qwen2VLForConditionalGeneration

from rayrl.data.images import to_png
from rayrl.data.visual_arithmetic import render, split_visual
from rayrl.demo.vision_policy import build_vision_tokenizer, load_image_processor, save_tiny_qwen2_vl
from rayrl.models.tokenizer import build_char_tokenizer, load_tokenizer
from rayrl.models.vision import (PLACEHOLDER, VisionTokens, check_vision_model, decode, expand_placeholders,
                                 mrope_positions,
                                 image_token_types, process_images)


@pytest.fixture(scope="module")
def tiny_vl(tmp_path_factory):
    path = save_tiny_qwen2_vl(tmp_path_factory.mktemp("vl") / "model")
    tokenizer, processor = load_tokenizer(path), load_image_processor(path)
    model = Qwen2VLForConditionalGeneration.from_pretrained(path).eval()
    return model, tokenizer, processor, VisionTokens.of(tokenizer, processor)


def test_an_image_given_as_path_bytes_or_array_becomes_the_same_png(tmp_path):
    png = render(3, 4)
    (tmp_path / "a.png").write_bytes(png)
    array = np.asarray(decode(png))
    assert to_png(tmp_path / "a.png", "t") == to_png(png, "t") == to_png(array, "t")
    assert render(3, 4) == png and render(4, 3) != png


@pytest.mark.parametrize("bad", [b"not an image", 42, "/no/such/file.png"])
def test_an_image_that_does_not_decode_is_refused_naming_the_task(bad):
    with pytest.raises(ValueError, match=r"task 'q7': an image does not decode"):
        to_png(bad, "q7")


def test_placeholders_expand_to_the_processor_token_count_and_must_match_the_images(tiny_vl):
    _, tokenizer, processor, vt = tiny_vl
    images = process_images((render(1, 2), render(30, 41)), processor)
    prompt = tokenizer(f"{PLACEHOLDER}+{PLACEHOLDER}=")["input_ids"]
    ids = expand_placeholders(prompt, images, vt, "two")
    assert ids.count(vt.pad) == sum(images.tokens_per_image(vt.merge)) == int(images.image_grid_thw.prod(-1).sum()) // 4
    assert ids.count(vt.start) == ids.count(vt.end) == 2
    with pytest.raises(ValueError, match=r"task 'one': 1 image placeholder\(s\) in the prompt for 2 image\(s\)"):
        expand_placeholders(tokenizer(f"{PLACEHOLDER}=")["input_ids"], images, vt, "one")


def test_a_model_without_a_vision_tower_is_refused_images():
    with pytest.raises(ValueError, match=r"task 'img:1\+2' carries images but the model .* has no vision tower"):
        check_vision_model(Qwen2Config(), "img:1+2")
    with pytest.raises(ValueError, match="has no image markup"):
        VisionTokens.of(build_char_tokenizer(), type("Processor", (), {"merge_size": 2}))


def test_the_visual_task_splits_disjointly_and_prompts_hold_only_the_picture():
    train, held = split_visual(0, 9, 20, seed=0)
    assert len(train) + len(held) == 100 and not {t.id for t in train} & {t.id for t in held}
    assert all(t.prompt == f"{PLACEHOLDER}=" and len(t.images) == 1 for t in train)
    assert build_vision_tokenizer()(PLACEHOLDER)["input_ids"] == build_vision_tokenizer().convert_tokens_to_ids(
        ["<|vision_start|>", "<|image_pad|>", "<|vision_end|>"])


def test_generation_logprobs_equal_the_full_forward_with_an_image_in_context(tiny_vl):
    model, tokenizer, processor, vt = tiny_vl
    task = split_visual(0, 9, 20, seed=0)[0][0]
    images = process_images(task.images, processor)
    prompt = torch.tensor([expand_placeholders(tokenizer(task.prompt)["input_ids"], images, vt, task.id)])
    torch.manual_seed(0)
    out = model.generate(input_ids=prompt, mm_token_type_ids=image_token_types(prompt, vt), do_sample=True,
                         pixel_values=images.pixel_values, image_grid_thw=images.image_grid_thw, max_new_tokens=6,
                         output_scores=True, return_dict_in_generate=True, top_k=0, top_p=1.0)
    completion = out.sequences[0, prompt.shape[1]:]
    sampled = torch.stack([torch.log_softmax(s[0].float(), -1)[t] for s, t in zip(out.scores, completion)])

    def forward_logprobs(pixels):
        with torch.no_grad():
            logits = model(input_ids=out.sequences, mm_token_type_ids=image_token_types(out.sequences, vt),
                           pixel_values=pixels, image_grid_thw=images.image_grid_thw).logits[0].float()
        return torch.log_softmax(logits[prompt.shape[1] - 1:-1], -1).gather(-1, completion[:, None])[:, 0]

    assert torch.allclose(forward_logprobs(images.pixel_values), sampled, atol=1e-5, rtol=0)
    other = process_images((render(8, 8),), processor).pixel_values  # the image is really read
    assert (forward_logprobs(other) - sampled).abs().max() > 1e-4


def test_the_prompt_stream_hands_out_tasks_with_their_images():
    from rayrl.data.stream import SEP, PromptStream

    train, _ = split_visual(0, 4, 5, seed=0)
    by_id = {t.id: t.images for t in train}
    handed = PromptStream(train, seed=1).take(2 * len(train))
    assert all(task.images and task.images == by_id[task.id.rsplit(SEP, 1)[0]] for task in handed)


def test_rotary_positions_equal_the_model_own_with_images_between_text(tiny_vl):
    model, tokenizer, processor, vt = tiny_vl
    images = process_images((render(1, 2), render(30, 41)), processor)
    ids = expand_placeholders(tokenizer(f"a{PLACEHOLDER}+{PLACEHOLDER}=12")["input_ids"], images, vt, "two")
    grids = [tuple(g) for g in images.image_grid_thw.tolist()]
    row = torch.tensor([ids])
    theirs, _ = model.model.get_rope_index(row, image_token_types(row, vt), images.image_grid_thw)
    assert torch.equal(mrope_positions(ids, grids, vt), theirs[:, 0])
    assert torch.equal(mrope_positions([5, 6, 7], [], vt), torch.arange(3).expand(3, -1))


@pytest.fixture(scope="module")
def vl_engine_and_learner(tiny_vl, make_cfg, tmp_path_factory):
    from rayrl import components

    path = save_tiny_qwen2_vl(tmp_path_factory.mktemp("vl-rl") / "model")
    cfg = make_cfg("rollout.temperature=1.0", "learner.max_tokens_per_micro_batch=64")
    return components.rollout_engine(cfg, str(path)), components.learner(cfg, str(path)), cfg


def _sampled_groups(engine, tasks, n=3):
    from rayrl.data import PromptTemplate
    from rayrl.types import GenerationRequest, TrajectoryGroup

    template = PromptTemplate(engine.tokenizer)
    requests = [GenerationRequest(t.id, template.encode(t), n, 5, 1.0, images=t.images) for t in tasks]
    samples = engine.generate_blocking(requests)
    return [TrajectoryGroup(t, samples[n * i: n * (i + 1)]) for i, t in enumerate(tasks)]


def test_hf_engine_logprobs_equal_the_learner_with_images_padded_and_packed(vl_engine_and_learner):
    from rayrl.batching import collate
    from rayrl.engines.learner.microbatch import microbatches, scatter
    from rayrl.engines.learner.scoring import microbatch_logprobs
    from rayrl.models.vision import attach_images
    from rayrl.types import Task

    engine, learner, _ = vl_engine_and_learner
    train, _ = split_visual(0, 9, 20, seed=0)
    # a text-only prompt beside the pictures: rows of different lengths, some without images
    tasks = [*train[:3], Task("text", "7+1=", "8")]
    groups = _sampled_groups(engine, tasks)
    vt = engine.vision.tokens
    assert all(s.prompt_ids.count(vt.pad) == 2 for g in groups[:3] for s in g.samples)  # expanded by the engine
    batch = collate(groups, engine.tokenizer.pad_token_id)
    scored = learner.compute_logprobs(batch)  # padded, every row at once
    mask = batch.loss_mask > 0
    assert (scored - batch.behav_logprobs)[mask].abs().max() <= 1e-5
    attach_images(batch, learner.vision)
    for pack in (True, False):
        out = torch.zeros_like(batch.loss_mask)
        for mb in microbatches(batch, 64, pack=pack):
            with torch.no_grad():
                scatter(microbatch_logprobs(learner.backend.model, mb, 1.0), mb, out)
        assert (out - batch.behav_logprobs)[mask].abs().max() <= 1e-5, f"pack={pack}"


def test_a_training_step_with_images_moves_the_language_model_only(vl_engine_and_learner):
    from rayrl.batching import collate

    engine, learner, _ = vl_engine_and_learner
    train, _ = split_visual(0, 9, 20, seed=0)
    groups = _sampled_groups(engine, train[3:7], n=4)
    for g, rewards in zip(groups, [(1, 0, 0, 1), (0, 1, 1, 0), (1, 1, 0, 0), (0, 0, 1, 1)]):
        for s, r in zip(g.samples, rewards):
            s.reward = float(r)
    model = learner.backend.model
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    stats = learner.train_step(collate(groups, engine.tokenizer.pad_token_id))
    assert stats["mismatch_tokens"] > 0 and stats["mismatch_max"] <= 1e-5  # the step's own forward, images in
    moved = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    assert moved and not any(".visual." in f".{n}" for n in moved)
    assert any("language_model" in n for n in moved)


@pytest.mark.parametrize("pack", [True, False])
def test_the_tower_runs_once_per_distinct_picture_with_the_same_logprobs_and_gradients(vl_engine_and_learner, pack):
    """A group's rows carry their picture once and the tower runs over distinct pictures only; log-probs and a
    trainable tower's gradients equal those of every row carrying its own copy (fp32)."""
    from rayrl.batching import collate
    from rayrl.engines.learner.microbatch import microbatches
    from rayrl.engines.learner.scoring import microbatch_logprobs
    from rayrl.models.vision import attach_images

    engine, learner, _ = vl_engine_and_learner
    model = learner.backend.model
    train, _ = split_visual(0, 9, 20, seed=0)
    batch = collate(_sampled_groups(engine, train[:3], n=4), engine.tokenizer.pad_token_id)
    tower = [p for n, p in model.named_parameters() if ".visual." in f".{n}"]
    seen = []
    handle = model.model.visual.register_forward_pre_hook(lambda m, args: seen.append(len(args[0])))
    try:
        for p in tower:
            p.requires_grad_(True)
        results = {}
        for shared in (True, False):
            attach_images(batch, learner.vision)
            if not shared:  # every row its own copy of its picture: nothing for the tower to share
                batch.image_inputs = [copy.copy(x) for x in batch.image_inputs]
            (mb,) = microbatches(batch, 10_000, pack=pack)
            model.zero_grad()
            seen.clear()
            logp = microbatch_logprobs(model, mb, 1.0)
            (logp * mb.loss_mask).sum().backward()
            results[shared] = (logp.detach(), [p.grad.clone() for p in tower], list(seen))
    finally:
        handle.remove()
        model.zero_grad()
        for p in tower:
            p.requires_grad_(False)
    (lp, grads, patches), (lp_copies, grads_copies, patches_copies) = results[True], results[False]
    one_picture = int(batch.image_inputs[0].pixel_values.shape[0])
    assert patches == [3 * one_picture] and patches_copies == [12 * one_picture]
    assert (lp - lp_copies).abs().max() <= 1e-6
    assert max(float((a - b).abs().max()) for a, b in zip(grads, grads_copies)) <= 1e-5
    assert max(float(g.abs().max()) for g in grads) > 0


def test_preflight_refuses_images_for_a_text_model_and_a_placeholder_count_off(make_cfg, tmp_path):
    from transformers import Qwen2Config

    from rayrl.config import ConfigError
    from rayrl.preflight import check_images, preflight
    from rayrl.types import Task

    build_char_tokenizer().save_pretrained(tmp_path)
    Qwen2Config(vocab_size=80, hidden_size=64, num_hidden_layers=1, num_attention_heads=1).save_pretrained(tmp_path)
    text_model = make_cfg("data.task=visual_arithmetic", "data.max_operand=9", "data.eval_size=20",
                          f"model.path={tmp_path}")
    with pytest.raises(ConfigError, match=r"task 'img:\d+\+\d+' carries images but the model .*has no vision tower"):
        preflight(text_model)
    two_for_one = Task("q3", f"{PLACEHOLDER}+{PLACEHOLDER}=", "5", images=(render(2, 3),))
    with pytest.raises(ConfigError, match=r"task 'q3': 2 image placeholder\(s\) in the prompt for 1 image\(s\)"):
        check_images(make_cfg("data.task=visual_arithmetic"), [two_for_one])
    check_images(make_cfg("data.task=visual_arithmetic"), split_visual(0, 3, 4, seed=0)[0])  # the demo: accepted
    check_images(make_cfg("data.task=visual_arithmetic", "rollout.engine=vllm"), split_visual(0, 3, 4, seed=0)[0])
    with pytest.raises(ConfigError, match=r"the bitwise on-policy mode takes text only"):
        check_images(make_cfg("data.task=visual_arithmetic", "rollout.engine=vllm", "rollout.bitwise_on_policy=true",
                              "cluster.n_gpus_per_node=1", "vllm.dtype=bfloat16", "learner.dtype=bfloat16"),
                     split_visual(0, 3, 4, seed=0)[0])
    two = Task("q4", f"{PLACEHOLDER}+{PLACEHOLDER}=", "5", images=(render(2, 3), render(1, 1)))
    with pytest.raises(ConfigError, match=r"task 'q4' carries 2 images, more than vllm.max_images_per_prompt=1"):
        check_images(make_cfg("rollout.engine=vllm", "vllm.max_images_per_prompt=1"), [two])


def test_lora_with_images_trains_adapters_and_the_synced_engine_samples_exactly(tiny_vl, make_cfg, tmp_path):
    from rayrl import components
    from rayrl.batching import collate
    from rayrl.models.lora import is_adapter

    path = str(save_tiny_qwen2_vl(tmp_path / "model"))
    cfg = make_cfg("rollout.temperature=1.0", "lora.enabled=true", "lora.rank=4", "learner.lr=1e-2")
    engine, learner = components.rollout_engine(cfg, path), components.learner(cfg, path)
    tasks = split_visual(0, 9, 20, seed=0)[0][:4]
    groups = _sampled_groups(engine, tasks, n=4)
    for g in groups:
        for i, s in enumerate(g.samples):
            s.reward = float(i % 2)
    learner.train_step(collate(groups, engine.tokenizer.pad_token_id))
    synced = dict(learner.named_full_weights())
    assert synced and all(is_adapter(n) for n in synced)
    assert any("lora_B" in n and t.abs().max() > 0 for n, t in synced.items())  # the adapters now change outputs
    params = dict(engine.model.named_parameters())
    with torch.no_grad():
        for name, tensor in synced.items():  # what a sync carries, by name
            params[name].copy_(tensor)
    batch = collate(_sampled_groups(engine, tasks, n=4), engine.tokenizer.pad_token_id)
    mask = batch.loss_mask > 0
    assert (learner.compute_logprobs(batch) - batch.behav_logprobs)[mask].abs().max() <= 1e-5


def test_the_rollout_check_names_a_task_whose_images_cannot_be_used():
    import asyncio

    from rayrl.data.images import BadImages, check_task_images
    from rayrl.image_refs import task_images
    from rayrl.types import Task

    png = render(1, 2)
    check_task_images(f"{PLACEHOLDER}=", (png,), "ok")
    with pytest.raises(BadImages, match=r"task 't1': image 0 does not decode"):
        check_task_images(f"{PLACEHOLDER}=", (b"\x89PNG broken",), "t1")
    with pytest.raises(BadImages, match=r"task 't2': 1 image placeholder\(s\) in the prompt for 2 image\(s\)"):
        asyncio.run(task_images(Task("t2", f"{PLACEHOLDER}=", "3", images=(png, png))))
    with pytest.raises(BadImages, match=r"task 't3': 1 image placeholder\(s\) in the prompt for 0 image\(s\)"):
        asyncio.run(task_images(Task("t3", f"{PLACEHOLDER}=", "3")))
    assert asyncio.run(task_images(Task("t4", "1+2=", "3"))) == ()  # text tasks pass untouched


def test_preflight_counts_a_prompts_expanded_image_tokens_against_the_micro_batch(make_cfg):
    from rayrl.config import ConfigError
    from rayrl.preflight import check_micro_batch
    from rayrl.types import Task

    big = Task("big", f"{PLACEHOLDER}=", "5", images=(render(2, 3, (112, 112)),))  # 16 image tokens
    cfg = make_cfg("data.task=visual_arithmetic", "rollout.max_new_tokens=6", "learner.max_tokens_per_micro_batch=24")
    # BOS, start, 16 image tokens, end, "=" and 6 new tokens: 26 > 24, though the unexpanded prompt holds 5
    with pytest.raises(ConfigError, match="the longest prompt plus rollout.max_new_tokens is 26 tokens"):
        check_micro_batch(cfg, [big])
    check_micro_batch(make_cfg("data.task=visual_arithmetic", "rollout.max_new_tokens=6",
                               "learner.max_tokens_per_micro_batch=26"), [big])


def test_the_vision_tower_keeps_sdpa_beside_the_gpu_varlen_kernel(tmp_path):
    """The learner's varlen kernel is causal; a picture's patches attend both ways, so the tower never gets it
    (it failed with an illegal memory access on an H100). Eager (CPU) stays eager throughout."""
    from rayrl.models.policy import load_policy
    from rayrl.models.varlen_attention import VARLEN

    path = save_tiny_qwen2_vl(tmp_path / "model")
    model, _ = load_policy(path, attn_implementation=VARLEN)
    assert model.config.text_config._attn_implementation == VARLEN
    assert model.config.vision_config._attn_implementation == "sdpa"
    model, _ = load_policy(path, attn_implementation="eager")
    assert model.config.vision_config._attn_implementation == "eager"
