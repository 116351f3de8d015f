"""Rollout throughput: RolloutWorker (vLLM AsyncLLM in a Ray actor, results by object ref) against raw
vllm.LLM.generate on the same model and requests, in one run, on one GPU.

    python -m benchmarks.rollout_throughput                 (GPU machine: 1.5B shape, 256 x 512 tokens)
    python -m benchmarks.rollout_throughput --tp 2          (GPU machine, 2 GPUs: tensor parallel on both sides)
    python -m benchmarks.rollout_throughput --smoke         (CPU: a tiny model, to check the script)

Both sides use random ("dummy") weights, the same engine arguments, the same sampling parameters
(temperature 0.7, ignore_eos, one log-prob per token, an fp32 lm_head: model.lm_head_fp32=true) and the
same prompt token ids. Our worker sits in the run's placement group (TP > 1: vLLM's Ray executor on the
worker's bundles; raw vLLM uses its default multiprocessing executor). Raw vLLM runs in
a child process without Ray's environment; it exits before the Ray side starts, so each has the GPU alone.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path

import ray

from benchmarks.common import print_table, run_outside_ray, write_result
from rayrl.config import load_config
from rayrl.engines.rollout.vllm_async import head_overrides
from rayrl.models.builder import QWEN2_1_5B_SHAPE, save_random_qwen2
from rayrl.placement import PlacementPlan
from rayrl.types import GenerationRequest

RAW = """
import json, sys, time
from vllm import LLM, SamplingParams
args, prompts = json.loads(sys.argv[1]), json.load(open(sys.argv[2]))
llm = LLM(**args["engine"])
params = SamplingParams(**args["sampling"])
llm.generate([{"prompt_token_ids": p} for p in prompts[:8]], params, use_tqdm=False)  # warm-up
t0 = time.perf_counter()
outs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
seconds = time.perf_counter() - t0
print("RAW_RESULT " + json.dumps({"seconds": seconds, "tokens": sum(len(o.outputs[0].token_ids) for o in outs)}))
"""


def run_raw(engine: dict, sampling: dict, prompts: list[list[int]]) -> dict:
    prompt_file = Path(tempfile.mkdtemp()) / "prompts.json"
    prompt_file.write_text(json.dumps(prompts))  # too long for a command line
    out = run_outside_ray(RAW, [json.dumps({"engine": engine, "sampling": sampling}), str(prompt_file)],
                          "RAW_RESULT ", timeout_s=540)
    return json.loads(out)


def run_ours(model_dir: Path, overrides: list[str], prompts: list[list[int]], max_tokens: int) -> dict:
    from rayrl.actors import RolloutWorker
    from rayrl.data import PromptTemplate
    from transformers import AutoTokenizer

    cfg = load_config(None, [f"model.path={model_dir}", *overrides])
    gpus = cfg.cluster.n_gpus_per_node
    ray.init(address="local", num_gpus=gpus, num_cpus=4 if not gpus else None, include_dashboard=False)
    plan = PlacementPlan(cfg, name="rollout-throughput", rollout_only=True)
    plan.create()
    try:
        template = ray.put(PromptTemplate(AutoTokenizer.from_pretrained(model_dir)))
        worker = RolloutWorker.options(**plan.actor_options("rollout")).remote(0, cfg, str(model_dir), template,
                                                                               None, None, [], 1)
        req = lambda i, p: GenerationRequest(str(i), p, 1, max_tokens, 0.7, ignore_eos=True)  # noqa: E731
        ray.get(worker.generate.remote([req(i, p) for i, p in enumerate(prompts[:8])]))  # warm-up
        t0 = time.perf_counter()
        samples = ray.get(worker.generate.remote([req(i, p) for i, p in enumerate(prompts)]))
        seconds = time.perf_counter() - t0
        ray.get(worker.shutdown.remote())
    finally:
        plan.remove()
        ray.shutdown()
    return {"seconds": seconds, "tokens": sum(len(s.completion_ids) for s in samples)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--smoke", action="store_true", help="tiny model on CPU, to check the script")
    parser.add_argument("--prompts", type=int, default=None, help="default 256 (smoke: 16)")
    parser.add_argument("--max-tokens", type=int, default=None, help="default 512 (smoke: 32)")
    parser.add_argument("--tp", type=int, default=1, help="tensor parallel size (GPUs) on both sides")
    args = parser.parse_args()
    if args.smoke:
        shape = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=2,
                     num_key_value_heads=1, head_dim=64, vocab_size=1000)
        n_prompts, max_tokens, gpu = args.prompts or 16, args.max_tokens or 32, False
    else:
        shape, n_prompts, max_tokens, gpu = dict(QWEN2_1_5B_SHAPE), args.prompts or 256, args.max_tokens or 512, True
    model_dir = save_random_qwen2(Path(tempfile.mkdtemp()) / "model", weights=False, **shape)  # dummy weights
    rng = random.Random(0)
    prompts = [[rng.randrange(4, shape["vocab_size"]) for _ in range(rng.randrange(32, 128))] for _ in range(n_prompts)]
    max_len = 128 + max_tokens
    engine = {"model": str(model_dir), "load_format": "dummy", "skip_tokenizer_init": True, "dtype": "bfloat16",
              "max_model_len": max_len, "gpu_memory_utilization": 0.85, "seed": 0,
              "logprobs_mode": "processed_logprobs", "enforce_eager": not gpu, "tensor_parallel_size": args.tp,
              "hf_overrides": head_overrides(True)}
    if not gpu:
        engine["kv_cache_memory_bytes"] = 2**28
    sampling = {"n": 1, "max_tokens": max_tokens, "temperature": 0.7, "ignore_eos": True, "logprobs": 0,
                "detokenize": False}
    raw = run_raw(engine, sampling, prompts)
    print(f"raw vllm.LLM.generate: {raw}", flush=True)
    overrides = ["model.backend=vllm", "model.lm_head_fp32=true", "rollout.load_format=dummy", "rollout.dtype=bfloat16",
                 f"rollout.max_model_len={max_len}", "rollout.gpu_memory_utilization=0.85",
                 f"rollout.enforce_eager={str(not gpu).lower()}", "rollout.cpu_kv_cache_gb=0.25",
                 f"rollout.tensor_parallel_size={args.tp}", f"cluster.n_gpus_per_node={args.tp if gpu else 0}"]
    ours = run_ours(model_dir, overrides, prompts, max_tokens)
    rows = [{"engine": "raw vllm.LLM.generate", **raw}, {"engine": "rayrl RolloutWorker (Ray)", **ours}]
    for r in rows:
        r["tokens_per_s"] = r["tokens"] / r["seconds"]
    ratio = rows[1]["tokens_per_s"] / rows[0]["tokens_per_s"]
    print_table(rows, ["engine", "tokens", "seconds", "tokens_per_s"])
    print(f"RolloutWorker / raw vLLM = {ratio:.3f} (goal >= 0.95)")
    if not args.smoke:
        path = write_result("rollout_throughput", {"model_shape": shape, "prompts": n_prompts, "tp": args.tp,
                                                   "max_new_tokens": max_tokens, "rows": rows, "ratio": ratio})
        print(f"-> {path}")


if __name__ == "__main__":
    main()
