"""Rollout throughput: RolloutWorker (vLLM AsyncLLM in a Ray actor, results by object ref) against raw
vllm.LLM.generate on the same model and requests, both engines alive at once, timed windows interleaved.

    python -m benchmarks.performance.rollout_throughput [--repeats 5]     (GPU: 1.5B shape, 256 x 512 tokens)
    python -m benchmarks.performance.rollout_throughput --tp 2            (2 GPUs: tensor parallel on both sides)
    python -m benchmarks.performance.rollout_throughput --shape 0.5b --prompts 256 --max-tokens 128 --memory-share 0.3
                                                               (async_vs_sync's one-GPU generation, raw)
    python -m benchmarks.performance.rollout_throughput --smoke           (CPU: a tiny model, to check the script)

Both sides use random ("dummy") weights, the same engine arguments (the same fixed KV-cache size and
memory share, so they fit side by side), the same sampling parameters (temperature 0.7, ignore_eos, one
log-prob per token, an fp32 lm_head) and the same prompt token ids. Raw vLLM runs in a child process
without Ray's environment and waits for a command per window. Each repeat times one window of each;
the order alternates between repeats. Reported: median and min-max tokens/s per side, and the median
and min-max of the per-repeat ratio ours / raw, and each side's GPU busy fraction (NVML's share of its windows
in which a kernel ran: generation's own ceiling when it shares the GPU with a learner).
"""

from __future__ import annotations

import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import ray

from benchmarks.common import benchmark_parser, outside_ray_env, print_table, spread, write_result
from benchmarks.performance.gpu_busy import GpuBusySampler
from rayrl.config import load_config
from rayrl.engines.rollout.vllm_async import head_overrides
from rayrl.testing.random_qwen2 import QWEN2_0_5B_SHAPE, QWEN2_1_5B_SHAPE, save_random_qwen2
from rayrl.placement import PlacementPlan
from rayrl.types import GenerationRequest

RAW = """
import json, sys, time
from vllm import LLM, SamplingParams
args, prompts = json.loads(sys.argv[1]), json.load(open(sys.argv[2]))
llm = LLM(**args["engine"])
params = SamplingParams(**args["sampling"])
llm.generate([{"prompt_token_ids": p} for p in prompts[:8]], params, use_tqdm=False)  # warm-up
print("RAW_READY", flush=True)
for line in sys.stdin:
    if line.strip() != "run":
        break
    t0 = time.perf_counter()
    outs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
    seconds = time.perf_counter() - t0
    tokens = sum(len(o.outputs[0].token_ids) for o in outs)
    print("RAW_RESULT " + json.dumps({"seconds": seconds, "tokens": tokens}), flush=True)
"""


class RawVLLM:
    """vllm.LLM in a child process outside Ray; run() times one generate window of all prompts."""

    def __init__(self, engine: dict, sampling: dict, prompts: list[list[int]]) -> None:
        prompt_file = Path(tempfile.mkdtemp()) / "prompts.json"
        prompt_file.write_text(json.dumps(prompts))  # too long for a command line
        self.proc = subprocess.Popen([sys.executable, "-c", RAW, json.dumps({"engine": engine, "sampling": sampling}),
                                      str(prompt_file)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     env=outside_ray_env())
        self._expect("RAW_READY")

    def _expect(self, marker: str) -> str:
        for line in self.proc.stdout:
            if line.startswith(marker):
                return line[len(marker):].strip()
        raise RuntimeError(f"raw vLLM exited (rc {self.proc.wait()}) before printing {marker}; see its stderr above")

    def run(self) -> dict:
        self.proc.stdin.write("run\n")
        self.proc.stdin.flush()
        return json.loads(self._expect("RAW_RESULT "))

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=120)


class OurWorker:
    """One RolloutWorker in the run's placement group (rollout bundles only); run() times one window."""

    def __init__(self, model_dir: Path, overrides: list[str], prompts: list[list[int]], max_tokens: int) -> None:
        from rayrl.actors import RolloutWorker

        cfg = load_config(None, [f"model.path={model_dir}", *overrides])
        gpus = cfg.cluster.n_gpus_per_node
        ray.init(address="local", num_gpus=gpus, num_cpus=4 if not gpus else None, include_dashboard=False)
        self.plan = PlacementPlan(cfg, name="rollout-throughput", rollout_only=True)
        self.plan.create()
        self.worker = RolloutWorker.options(**self.plan.actor_options("rollout")).remote(
            0, cfg, str(model_dir), None, [], 1)
        self.requests = [GenerationRequest(str(i), p, 1, max_tokens, 0.7, ignore_eos=True) for i, p in enumerate(prompts)]
        ray.get(self.worker.generate.remote(self.requests[:8]))  # warm-up

    def run(self) -> dict:
        t0 = time.perf_counter()
        samples = ray.get(self.worker.generate.remote(self.requests))
        return {"seconds": time.perf_counter() - t0, "tokens": sum(len(s.completion_ids) for s in samples)}

    def close(self) -> None:
        ray.get(self.worker.shutdown.remote())
        self.plan.remove()
        ray.shutdown()


def main() -> None:
    p = benchmark_parser(__doc__)
    p.add_argument("--smoke", action="store_true", help="tiny model on CPU, to check the script")
    p.add_argument("--shape", choices=["0.5b", "1.5b"], default="1.5b", help="the model shape (GPU)")
    p.add_argument("--prompts", type=int, default=None, help="default 256 (smoke: 16)")
    p.add_argument("--max-tokens", type=int, default=None, help="default 512 (smoke: 32)")
    p.add_argument("--tp", type=int, default=1, help="tensor parallel size (GPUs) on both sides")
    p.add_argument("--repeats", type=int, default=5, help="timed windows per side (at least 5 for a result)")
    p.add_argument("--memory-share", type=float, default=0.4, help="gpu_memory_utilization of each side")
    p.add_argument("--kv-cache-gb", type=float, default=16.0, help="KV cache of each side (smoke: 0.25)")
    args = p.parse_args()
    if args.smoke:
        shape = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=2,
                     num_key_value_heads=1, head_dim=64, vocab_size=1000)
        n_prompts, max_tokens, gpu, kv_gb = args.prompts or 16, args.max_tokens or 32, False, 0.25
    else:
        shape = dict(QWEN2_0_5B_SHAPE if args.shape == "0.5b" else QWEN2_1_5B_SHAPE)
        n_prompts, max_tokens, gpu = args.prompts or 256, args.max_tokens or 512, True
        kv_gb = args.kv_cache_gb
    model_dir = save_random_qwen2(Path(tempfile.mkdtemp()) / "model", weights=False, **shape)  # dummy weights
    rng = random.Random(0)
    prompts = [[rng.randrange(4, shape["vocab_size"]) for _ in range(rng.randrange(32, 128))] for _ in range(n_prompts)]
    max_len = 128 + max_tokens
    engine = {"model": str(model_dir), "load_format": "dummy", "skip_tokenizer_init": True, "dtype": "bfloat16",
              "max_model_len": max_len, "gpu_memory_utilization": args.memory_share, "seed": 0,
              "kv_cache_memory_bytes": int(kv_gb * 2**30), "logprobs_mode": "processed_logprobs",
              "enforce_eager": not gpu, "tensor_parallel_size": args.tp, "hf_overrides": head_overrides(True)}
    sampling = {"n": 1, "max_tokens": max_tokens, "temperature": 0.7, "ignore_eos": True, "logprobs": 0,
                "detokenize": False}
    overrides = ["rollout.engine=vllm", "vllm.lm_head_fp32=true", "vllm.load_format=dummy", "vllm.dtype=bfloat16",
                 f"vllm.max_model_len={max_len}", f"vllm.gpu_memory_utilization={args.memory_share}",
                 f"vllm.kv_cache_gb={kv_gb}", f"vllm.enforce_eager={str(not gpu).lower()}",
                 f"vllm.tensor_parallel_size={args.tp}", f"cluster.n_gpus_per_node={args.tp if gpu else 0}"]
    raw = RawVLLM(engine, sampling, prompts)
    ours = OurWorker(model_dir, overrides, prompts, max_tokens)
    windows = []
    with GpuBusySampler(period_s=0.05) as sampler:
        try:
            for i in range(args.repeats):
                order = [("raw", raw), ("ours", ours)] if i % 2 == 0 else [("ours", ours), ("raw", raw)]
                for side, engine_side in order:
                    start = time.time()
                    w = engine_side.run()
                    busy = sampler.busy(start, time.time())
                    windows.append({"repeat": i, "side": side, **w, "tokens_per_s": w["tokens"] / w["seconds"],
                                    "gpu_busy": busy[0] if busy else None})
                    print(windows[-1], flush=True)
        finally:
            ours.close()
            raw.close()
    rate = {s: [w["tokens_per_s"] for w in windows if w["side"] == s] for s in ("raw", "ours")}
    ratios = [o / r for r, o in zip(rate["raw"], rate["ours"])]
    busy = {s: [w["gpu_busy"] for w in windows if w["side"] == s and w["gpu_busy"] is not None] for s in rate}
    rows = [{"engine": name, "repeats": len(rate[s]), **{f"tok_s_{k}": v for k, v in spread(rate[s]).items()},
             "gpu_busy": statistics.median(busy[s]) if busy[s] else None}
            for s, name in (("raw", "raw vllm.LLM.generate"), ("ours", "rayrl RolloutWorker (Ray)"))]
    print_table(rows, ["engine", "repeats", "tok_s_median", "tok_s_min", "tok_s_max", "gpu_busy"])
    ratio = spread(ratios)
    print(f"RolloutWorker / raw vLLM: median {ratio['median']:.3f} (min {ratio['min']:.3f}, max {ratio['max']:.3f})"
          f" over {len(ratios)} interleaved repeats (goal >= 0.95)")
    if not args.smoke:
        path = write_result("rollout_throughput", {
            "shape": args.shape, "model_shape": shape, "prompts": n_prompts, "tp": args.tp, "max_new_tokens": max_tokens,
            "memory_share": args.memory_share, "kv_cache_gb": kv_gb, "windows": windows, "rows": rows,
            "ratio": ratio}, args.commit)
        print(f"-> {path}")


if __name__ == "__main__":
    main()
