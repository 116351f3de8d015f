"""Images in a task: normalised and checked with one message per bad input, expanded into the prompt the way the
model counts them, and a tiny Qwen2-VL whose generation log-probs equal its full forward's with an image in
context (the basis of rollout-learner exactness)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import Qwen2Config, Qwen2VLForConditionalGeneration

from rayrl.data.images import to_png
from rayrl.data.visual_arithmetic import render, split_visual
from rayrl.demo.vision_policy import build_vision_tokenizer, load_image_processor, save_tiny_qwen2_vl
from rayrl.models.tokenizer import build_char_tokenizer, load_tokenizer
from rayrl.models.vision import (PLACEHOLDER, VisionTokens, check_vision_model, decode, expand_placeholders,
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
