"""How far bf16 numerics alone move the log-probs of sampled tokens, on vision_gpu's random-weight Qwen2.5-VL-3B
shape, for its picture prompts and its text twin: the size of gap any bf16 rollout and learner can be expected to
show on it. One model, no Ray, no vLLM: completions sampled from the fp32 model (temperature 1, exactly --tokens
long), then the same sequences scored three ways: fp32 (sdpa), bf16 (sdpa) and bf16 with eager attention
(another set of kernels over the same bf16 weights, as two engines are). The weights are saved in bf16, so no side
rounds a weight: every difference is rounding inside the forward. Reported per kind: mean and max |Δ log p| over
the completion tokens, fp32 against bf16 and bf16 sdpa against bf16 eager.

    python -m benchmarks.performance.bf16_gap --commit SHA [--prompts 16] [--tokens 128] [--seed 0] [--device cuda]
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch
from transformers import AutoTokenizer, Qwen2_5_VLForConditionalGeneration

from benchmarks.common import benchmark_parser, print_table, write_result
from benchmarks.performance.vision_gpu import tasks
from rayrl.models.vision import VisionPrompts, image_token_types
from rayrl.testing.random_qwen2_vl import save_random_qwen2_5_vl


def model_inputs(task, tokenizer, vision: VisionPrompts, device) -> dict:
    """One prompt as the model takes it: expanded ids, its picture's patches and grid, which tokens are image ones."""
    ids, images = vision.prepare(tokenizer(task.prompt)["input_ids"], task.images, task.id)
    ids = torch.tensor([ids], device=device)
    extra = {} if images is None else {"pixel_values": images.pixel_values.to(device),
                                       "image_grid_thw": images.image_grid_thw.to(device)}
    return {"input_ids": ids, "mm_token_type_ids": image_token_types(ids, vision.tokens), **extra}


@torch.no_grad()
def sample(model, inputs: dict, tokens: int, seed: int, markup: list[int]) -> torch.Tensor:
    """tokens completion ids drawn at temperature 1 (no EOS stop), never the image markup, which the forward
    would take for a picture's place (rayrl's rollout ends a sample there)."""
    torch.manual_seed(seed)
    out = model.generate(**inputs, do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=tokens,
                         min_new_tokens=tokens, eos_token_id=None, pad_token_id=0,
                         bad_words_ids=[[t] for t in markup])
    return out[0, inputs["input_ids"].shape[1]:]


@torch.no_grad()
def completion_logps(model, inputs: dict, completion: torch.Tensor) -> torch.Tensor:
    """fp32 log-probs of the completion's tokens, each given everything before it."""
    ids = torch.cat([inputs["input_ids"], completion[None]], 1)
    full = {**inputs, "input_ids": ids, "mm_token_type_ids": torch.cat(
        [inputs["mm_token_type_ids"], torch.zeros_like(completion)[None]], 1)}
    logits = model(**full).logits[0, -len(completion) - 1:-1].float()
    return logits.log_softmax(-1).gather(-1, completion[:, None])[:, 0]


def gaps(a: list[torch.Tensor], b: list[torch.Tensor]) -> dict:
    d = torch.cat([(x - y).abs() for x, y in zip(a, b)])
    return {"mean": float(d.mean()), "max": float(d.max()), "tokens": int(d.numel())}


def main() -> None:
    p = benchmark_parser(__doc__)
    p.add_argument("--prompts", type=int, default=16, help="prompts of each kind, one completion each")
    p.add_argument("--tokens", type=int, default=128, help="completion tokens a prompt")
    p.add_argument("--image", type=int, default=448, help="picture side in pixels (a multiple of 28)")
    p.add_argument("--seed", type=int, default=0, help="prompt i's completion is drawn with seed + i")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = p.parse_args()
    torch.backends.cudnn.allow_tf32 = False  # the fp32 reference in fp32 (the patch embedding is a convolution)
    path = save_random_qwen2_5_vl(Path(tempfile.mkdtemp()) / "qwen2.5-vl-3b", max_pixels=args.image ** 2,
                                  device=args.device)
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(path, dtype=torch.float32, attn_implementation="sdpa")
    model.to(args.device).eval()
    vision = VisionPrompts.load(path, model.config, tokenizer)
    kinds = {kind: [model_inputs(t, tokenizer, vision, args.device)
                    for t in tasks(args.image, args.prompts, kind == "images")] for kind in ("images", "text")}
    done = {kind: [sample(model, x, args.tokens, args.seed + i, vision.tokens.markup) for i, x in enumerate(xs)]
            for kind, xs in kinds.items()}
    scored = {"fp32": {k: [completion_logps(model, x, c) for x, c in zip(kinds[k], done[k])] for k in kinds}}
    model.to(torch.bfloat16)
    for attention in ("sdpa", "eager"):
        model.set_attn_implementation(attention)
        scored[f"bf16-{attention}"] = {k: [completion_logps(model, x, c) for x, c in zip(kinds[k], done[k])]
                                      for k in kinds}
    rows = [{"kind": k, "fp32_vs_bf16": gaps(scored["fp32"][k], scored["bf16-sdpa"][k]),
             "bf16_sdpa_vs_eager": gaps(scored["bf16-sdpa"][k], scored["bf16-eager"][k])} for k in kinds]
    out = write_result("bf16_gap", {"shape": "qwen2.5-vl-3b", "device": args.device, "image_px": args.image,
                                    "prompts": args.prompts, "tokens": args.tokens, "seed": args.seed,
                                    "rows": rows}, args.commit)
    print_table([{"kind": r["kind"], **{f"{c} mean/max": f"{r[c]['mean']:.4f} / {r[c]['max']:.3f}"
                                        for c in ("fp32_vs_bf16", "bf16_sdpa_vs_eager")}} for r in rows],
                ["kind", "fp32_vs_bf16 mean/max", "bf16_sdpa_vs_eager mean/max"])
    print(f"-> {out}")


if __name__ == "__main__":
    main()
