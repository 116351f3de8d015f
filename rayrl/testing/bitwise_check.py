"""The bitwise on-policy check (rollout.bitwise_on_policy) with a Qwen2-1.5B-shaped model of random weights, on one
GPU: vLLM batch-invariant across its 256-token switch and the learner's bitwise forward scoring vLLM's sampled
tokens exactly (engine_check); a recipe run recording every step's mismatch and per-tensor sync checks (recipe).
Used by tests/gpu/test_bitwise_gpu.py and benchmarks/performance/bitwise.py."""

from __future__ import annotations

import gc
import json
import os
import random
import statistics
from pathlib import Path

import torch
import torch.nn.functional as F

from rayrl.testing.logprob_gap import mismatch
from rayrl.config import load_config
from rayrl.data.gsm8k import write_synthetic_gsm8k
from rayrl.engines.rollout.vllm_modes import BITWISE_GRAPHS
from rayrl.models.bitwise_ops import strided_rows
from rayrl.testing.random_qwen2 import QWEN2_1_5B_SHAPE, save_random_qwen2
from rayrl.models.policy import load_policy
from rayrl.models.tokenizer import TEXT_CHARS

H200_BF16_PEAK = 989e12  # dense bf16 FLOP/s
EXTENSION = "rayrl.engines.rollout.vllm_bitwise.BitwiseExtension"
PROMPT_LENGTHS = (5, 17, 40, 64, 130, 250, 400, 700)  # 8 x 256 sampled tokens = 2,048


def fixtures(root: Path) -> tuple[Path, Path]:
    shape = {k: v for k, v in QWEN2_1_5B_SHAPE.items() if k != "vocab_size"}
    model = _uneven(save_random_qwen2(root / "model", chars=TEXT_CHARS, **shape))
    return model, write_synthetic_gsm8k(root / "gsm8k.jsonl", 512)


def _uneven(model_dir: Path) -> Path:
    """Norm weights away from 1 and biases away from 0, as a trained model has them: with the initial 1s and 0s
    an operation that scales or adds them in another order on one side gives the same bits (the learner's qkv
    bias, fused into its GEMM, matched vLLM's separate add until the first update)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith(".bias"):
                p.add_((0.1 if "norm" in name else 0.05) * torch.randn(p.shape, generator=g).to(p.dtype))
    model.save_pretrained(model_dir)
    return model_dir


def _sampled(outputs) -> list[tuple[list[int], list[float]]]:
    return [(list(c.token_ids), [next(iter(d.values())).logprob for d in c.logprobs])
            for o in outputs for c in o.outputs]


def _engine(model_dir: Path):
    from vllm import LLM

    return LLM(model=str(model_dir), dtype="bfloat16", compilation_config=BITWISE_GRAPHS, block_size=16,
               max_model_len=1024, max_num_seqs=512, gpu_memory_utilization=0.45, enable_prefix_caching=False, seed=0,
               skip_tokenizer_init=True, logprobs_mode="processed_logprobs", worker_extension_cls=EXTENSION)


def _learner_logprobs(model, seqs: list[list[int]], temperature: float, grad: bool = False) -> list[torch.Tensor]:
    """Each sequence's token log-probs (entry t: log p(token t | < t)) from one packed row, as the learner scores."""
    from rayrl.engines.learner.scoring import token_logprobs

    lengths = torch.tensor([len(s) for s in seqs])
    ids = torch.tensor([t for s in seqs for t in s], device="cuda")[None]
    pos = torch.cat([torch.arange(n) for n in lengths.tolist()]).cuda()[None]
    cu = F.pad(lengths.cumsum(0), (1, 0)).to(torch.int32).cuda()
    with torch.set_grad_enabled(grad):
        logp = token_logprobs(model, ids, None, temperature, pos, cu_seq_lens_q=cu, cu_seq_lens_k=cu,
                              max_length_q=int(lengths.max()), max_length_k=int(lengths.max()))[0]
    return list(logp.split(lengths.tolist()))


def _response_gap(logps, prompts, samples) -> float:
    learner = [lp[len(p):].tolist() for lp, p in zip(logps, prompts)]
    return mismatch(learner, [got for _, got in samples])["mismatch_max"]


LAYOUTS = {  # other layouts of the logits vLLM's log-prob kernel could be given (the learner's: bf16, padded stride)
    "fp32_contiguous": lambda rows, stride: rows.float().contiguous(),
    "fp32_padded": lambda rows, stride: strided_rows(rows.float(), stride),
    "bf16_contiguous": lambda rows, stride: rows.contiguous(),
}


def _layout_gaps(model, seqs, prompts, samples) -> dict[str, float]:
    """The bitwise forward's gap at temperature 1 when vLLM's log-prob kernel gets the logits in another layout than
    the one vLLM's sampler gives it: what the layout alone changes (Triton specialises on dtype and stride)."""
    from rayrl.models import bitwise_ops

    matched, gaps = bitwise_ops.sampler_logits, {}
    try:
        for name, layout in LAYOUTS.items():
            bitwise_ops.sampler_logits = lambda logits, temperature, row_stride, f=layout: f(logits, row_stride)
            gaps[name] = _response_gap(_learner_logprobs(model, seqs, 1.0), prompts, samples)
    finally:
        bitwise_ops.sampler_logits = matched
    return gaps


def _grads(model, seqs, prompts) -> torch.Tensor:
    model.zero_grad(set_to_none=True)
    logps = _learner_logprobs(model, seqs, 1.0, grad=True)
    sum(lp[len(p):].sum() for lp, p in zip(logps, prompts)).backward()
    return torch.cat([p.grad.float().flatten() for _, p in sorted(model.named_parameters())])


def engine_check(model_dir: Path) -> dict:
    """vLLM in this process's engine subprocess (batch-invariant), the learner's forward in this process (which
    calls vLLM's kernels itself, as in the learner)."""
    saved_env = dict(os.environ)  # vLLM's switch: this check's only, not the recipe runs'
    os.environ["VLLM_BATCH_INVARIANT"] = "1"
    os.environ["VLLM_WORKER_MULTIPROC_METHOD"] = "spawn"  # this process has initialised CUDA
    try:
        return _engine_check(model_dir)
    finally:
        os.environ.clear()
        os.environ.update(saved_env)


def _engine_check(model_dir: Path) -> dict:
    from vllm import SamplingParams

    from rayrl.models.bitwise_qwen2 import BitwiseQwen2
    from rayrl.models.varlen_attention import VARLEN

    rng = random.Random(0)
    vocab = len(TEXT_CHARS)
    prompt = lambda n: [rng.randrange(3, vocab) for _ in range(n)]  # noqa: E731
    llm = _engine(model_dir)
    try:
        greedy = SamplingParams(temperature=0.0, max_tokens=32, logprobs=0, ignore_eos=True, detokenize=False)
        target = prompt(40)
        others = [prompt(rng.randrange(8, 40)) for _ in range(299)]
        alone = _sampled(llm.generate([{"prompt_token_ids": target}], greedy, use_tqdm=False))[0]
        batched = _sampled(llm.generate([{"prompt_token_ids": p} for p in others[:150] + [target] + others[150:]],
                                        greedy, use_tqdm=False))[150]
        prompts = [prompt(n) for n in PROMPT_LENGTHS]
        sampling = [SamplingParams(temperature=1.0, max_tokens=256, logprobs=0, ignore_eos=True, detokenize=False,
                                   seed=i) for i in range(len(prompts))]
        samples = _sampled(llm.generate([{"prompt_token_ids": p} for p in prompts], sampling, use_tqdm=False))
    finally:
        llm.llm_engine.engine_core.shutdown()
        del llm
        gc.collect()
    seqs = [p + toks for p, (toks, _) in zip(prompts, samples)]
    hf, _ = load_policy(model_dir, VARLEN)
    hf = hf.to("cuda", torch.bfloat16)
    bitwise = BitwiseQwen2(hf, block_size=16)
    row = {"prefill_tokens_first_step": sum(map(len, others)) + len(target), "decode_running": len(others) + 1,
           "alone_vs_batched_max": mismatch([alone[1]], [batched[1]])["mismatch_max"],
           "alone_vs_batched_same_tokens": alone[0] == batched[0],
           "sampled_tokens": sum(len(t) for t, _ in samples), "prompt_lengths": list(PROMPT_LENGTHS),
           "learner_bitwise_max": _response_gap(_learner_logprobs(bitwise, seqs, 1.0), prompts, samples),
           "learner_normal_max": _response_gap(_learner_logprobs(hf, seqs, 1.0), prompts, samples),
           "learner_bitwise_max_other_layouts": _layout_gaps(bitwise, seqs, prompts, samples)}
    g_bitwise, g_normal = _grads(bitwise, seqs, prompts), _grads(hf, seqs, prompts)
    row["grad_cosine"] = float(F.cosine_similarity(g_bitwise, g_normal, dim=0))
    row["grad_norm_ratio"] = float(g_bitwise.norm() / g_normal.norm())
    del hf, bitwise, g_bitwise, g_normal
    gc.collect()
    torch.cuda.empty_cache()  # the recipe runs after it share this GPU
    return row


def recipe(model_dir: Path, data: Path, out: Path, bitwise: bool, steps: int, tag: str, extra: tuple = (),
           warmup: int = 1) -> dict:
    """One recipe run; mismatch on every step, speed over the steps after `warmup` (the first step compiles
    and autotunes kernels for the run's shapes, in each mode its own)."""
    from rayrl.trainer import train

    overrides = [f"model.path={model_dir}", f"data.path={data}", f"learner.total_steps={steps}",
                 "learner.lr_warmup_steps=0", "rollout.batch_size=16", "rollout.temperature=1.0", "data.eval_size=32",
                 "algorithm.dynamic_sampling=false", "scheduler.include_dashboard=false",
                 f"metrics.run_dir={out}", f"metrics.run_name={tag}", "metrics.progress=false",
                 "checkpoint.save_final=false", "checkpoint.every_steps=0",
                 f"rollout.bitwise_on_policy={str(bitwise).lower()}", *extra]
    cfg = load_config("recipes/gsm8k_grpo_1gpu.yaml", overrides)
    summary = train(cfg)
    steps_ = [r for r in map(json.loads, (Path(summary["run_dir"]) / "metrics.jsonl").read_text().splitlines())
              if "step" in r]
    n_params = _n_params(model_dir)
    timed = steps_[warmup:] or steps_
    return {"mode": "bitwise" if bitwise else "normal", "steps": len(steps_),
            # which forward each side ran: the learner's scoring model, and vLLM's graphs
            "learner_forward": "BitwiseQwen2 (vLLM's kernels)" if bitwise else "Hugging Face Qwen2",
            "vllm_graphs": "eager" if cfg.vllm.enforce_eager else
            ("full decode graphs, no torch.compile" if bitwise else "vLLM default (torch.compile, CUDA graphs)"),
            "mismatch_max": [s["mismatch_max"] for s in steps_],
            "mismatch_tokens": [s["mismatch_tokens"] for s in steps_],
            # after each sync, per tensor: vLLM's rows against what the learner sent, and the tensors the learner's
            # scoring forward read against the same (None: no check that step)
            "sync_unequal_tensors": [s.get("sync_unequal_tensors") for s in steps_],
            "sync_unequal_names": [s.get("sync_unequal_names") for s in steps_],
            "sync_changed_after_wake": [s.get("sync_changed_after_wake") for s in steps_],
            "view_unequal_tensors": [s.get("bitwise_view_unequal") for s in steps_],
            "view_checked_tensors": [s.get("bitwise_view_checked") for s in steps_],
            "warmup_steps": warmup, "train_s": [s["train_s"] for s in steps_], "wait_s": [s["wait_s"] for s in steps_],
            "rollout_tokens_per_s": sum(s["tokens"] for s in timed) / sum(s["wait_s"] for s in timed),
            "learner_mfu": 6 * n_params * sum(s["tokens"] for s in timed) / sum(s["train_s"] for s in timed)
            / H200_BF16_PEAK, "step_s_median": statistics.median(s["step_s"] for s in timed)}


def _n_params(model_dir: Path) -> int:
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_dir))
    return sum(p.numel() for p in model.parameters())
