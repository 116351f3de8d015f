"""GPU check of the learner groups (one rank per GPU, 1 or 2 GPUs): FSDP2 and DeepSpeed ZeRO-3 take PPO
steps in bf16 (the policy and its critic, sharing each GPU); the HF export loads in vLLM, which samples
completions, and the learner rescores them: the rollout-training mismatch over >= 500 sampled tokens
(mean |Δ log p|, token_mult_prob_error = mean exp|Δ|, k3 KL; the worst token is reported, not a bar).

    python tests/gpu/learner_check.py [--backends fsdp,zero3] [--gpus N] [--out DIR] [key=value ...]
    (overrides such as vllm.lm_head_fp32=true apply to learners and vLLM alike)
"""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

import ray

from rayrl.testing.logprob_gap import mismatch
from rayrl.testing.records import benchmark_parser, format_table, run_outside_ray, write_result
from rayrl.actors import CriticGroup, LearnerGroup
from rayrl.config import load_config
from rayrl.engines.rollout.vllm_async import head_overrides
from rayrl.demo import prepare_models
from rayrl.placement import PlacementPlan
from rayrl.types import Sample, Task, TrajectoryGroup



BACKENDS = {"fsdp": ["learner.backend=fsdp"], "zero3": ["learner.backend=deepspeed", "learner.zero_stage=3"]}

VLLM_SCRIPT = """
import gc, json, sys
from vllm import LLM, SamplingParams
model_dir, prompts, n, overrides = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), json.loads(sys.argv[4])

def rescore(llm, seqs):  # each completion token's log-prob in one prefill pass (prompt_logprobs)
    outs = llm.generate([{"prompt_token_ids": p + t} for p, (t, _) in zip(prompts, seqs)],
                        SamplingParams(max_tokens=1, prompt_logprobs=0))
    return [[d[tok].logprob for d, tok in zip(o.prompt_logprobs[len(p):], t)]
            for o, p, (t, _) in zip(outs, prompts, seqs)]

result = {}
for dtype in ("bfloat16", "float32"):
    llm = LLM(model=model_dir, dtype=dtype, enforce_eager=True, gpu_memory_utilization=0.25, max_model_len=256,
              seed=0, hf_overrides=overrides, enable_prefix_caching=False)  # head dtype as the rollout engine runs it
    if dtype == "bfloat16":  # the rollout path: sampling at temperature 1, one log-prob per sampled token
        outs = llm.generate([{"prompt_token_ids": p} for p in prompts],
                            SamplingParams(temperature=1.0, seed=0, max_tokens=n, logprobs=0, ignore_eos=True))
        seqs = [[list(o.outputs[0].token_ids), [lp[t].logprob for t, lp in zip(o.outputs[0].token_ids,
                                                                                o.outputs[0].logprobs)]]
                for o in outs]
        result["decode"] = seqs
    result[dtype + "_prefill"] = rescore(llm, seqs)
    del llm
    gc.collect()
print("VLLM_RESULT " + json.dumps(result), flush=True)
"""


def vllm_scores(model_dir: str, prompts: list[list[int]], n_tokens: int, lm_head_fp32: bool) -> dict:
    """vLLM in its own process, outside the Ray driver (an engine started inside it hung here): sampled
    bf16 sequences with their decode log-probs, rescored by a bf16 and an fp32 prefill pass."""
    overrides = json.dumps(head_overrides(lm_head_fp32))
    out = run_outside_ray(VLLM_SCRIPT, [model_dir, json.dumps(prompts), str(n_tokens), overrides], "VLLM_RESULT ",
                          timeout_s=300)
    return json.loads(out)


def _gap(a: list[list[float]], b: list[list[float]]) -> tuple[float, float]:
    diffs = [abs(x - y) for ra, rb in zip(a, b) for x, y in zip(ra, rb)]
    return max(diffs), sum(diffs) / len(diffs)


def check(backend: list[str], base: Path, prompts: list[list[int]], gpus: int, overrides: list[str]) -> dict:
    name = backend[0].split("=")[1]
    cfg = load_config(None, [f"cluster.n_gpus_per_node={gpus}", f"learner.num_workers={gpus}", "learner.dtype=bfloat16",
                             "learner.lr=1e-5", "rollout.temperature=1.0", "algorithm.type=ppo", f"model.path={base}",
                             *backend, *overrides])
    plan = PlacementPlan(cfg, name=f"check-{name}", learner_only=True)
    plan.create()
    group = LearnerGroup(cfg, str(base), plan)
    critic = CriticGroup(cfg, str(base), 0, plan)
    try:
        groups = [TrajectoryGroup(Task(str(i), "", "0"), [
            Sample(str(i), p, [4 + (i + j) % 10 for j in range(8)], [-1.0] * 8, [0] * 8, "length",
                   reward=float(k % 2)) for k in range(4)]) for i, p in enumerate(prompts[:16])]
        items = [[ray.put(g)] for g in groups]
        losses, critic_losses = [], []
        for _ in range(3):  # the trainer's ppo step: critic values, policy step, critic step on the returns
            values = critic.values(items)
            result = group.train(items, values)
            losses.append(result.stats["loss"])
            critic_losses.append(critic.train(items, result.returns, values)["critic_loss"])
        export = base.parent / f"export-{name}"
        group.save(str(export))
        vllm = vllm_scores(str(export), prompts, 8, cfg.vllm.lm_head_fp32)
        seqs = vllm["decode"]
        probe = [TrajectoryGroup(Task(str(i), "", "0"), [Sample(str(i), p, toks, lps, [0] * len(toks), "length")])
                 for i, (p, (toks, lps)) in enumerate(zip(prompts, seqs))]
        learner_lp = group.completion_logprobs(probe)
    finally:
        group.kill()
        critic.kill()
        plan.remove()
    decode = [lps for _, lps in seqs]
    row = {"backend": name, "gpus": gpus, "losses": losses, "critic_losses": critic_losses,
           "tokens_compared": sum(map(len, decode)),
           "mean_token_prob": sum(math.exp(x) for r in decode for x in r) / sum(map(len, decode)),
           **mismatch(learner_lp, decode)}
    # the acceptance gap, then the same gap against references that show the bf16 noise floor
    for key, a, b in (("logprob_diff", learner_lp, decode),
                      ("vs_vllm_bf16_prefill", learner_lp, vllm["bfloat16_prefill"]),
                      ("vllm_decode_vs_prefill", decode, vllm["bfloat16_prefill"]),
                      ("vs_vllm_fp32", learner_lp, vllm["float32_prefill"]),
                      ("vllm_bf16_vs_fp32", decode, vllm["float32_prefill"])):
        row[f"max_{key}"], row[f"mean_{key}"] = _gap(a, b)
    return row


def main() -> None:
    p = benchmark_parser(__doc__)
    p.add_argument("--backends", default="fsdp,zero3", help="comma-separated, of: " + ", ".join(BACKENDS))
    p.add_argument("--gpus", type=int, default=None, help="learner ranks, one GPU each (default: up to 2 GPUs here)")
    p.add_argument("--n-prompts", type=int, default=64, help="prompts sampled by vLLM, 8 tokens each")
    p.add_argument("--out", default=None)
    p.add_argument("overrides", nargs="*", help="config overrides, key=value")
    args = p.parse_args()
    work = Path(tempfile.mkdtemp())
    # the arithmetic policy built from config and warmed up: trained, so its next-token
    # distributions are peaked (a random model's are near-uniform and would prove little)
    cfg = load_config(None, [f"demo.cache_dir={work}"])
    base = prepare_models(cfg).policy
    from rayrl.data import PromptTemplate, split
    from transformers import AutoTokenizer

    template = PromptTemplate(AutoTokenizer.from_pretrained(base))
    prompts = [template.encode(t) for t in split(cfg.data)[1][:args.n_prompts]]
    import torch

    gpus = args.gpus or min(2, torch.cuda.device_count())
    ray.init(address="local", num_gpus=gpus, include_dashboard=False)
    rows = [check(BACKENDS[b], base, prompts, gpus, args.overrides) for b in args.backends.split(",")]
    ray.shutdown()
    for r in rows:  # the restated bar: the mean, not the worst token
        r["ok"] = (r["mismatch_tokens"] >= 500 and r["mismatch_abs_mean"] <= 0.01 and r["token_mult_prob_error"] <= 1.02
                   and all(math.isfinite(x) for x in r["losses"] + r["critic_losses"]))
    print(format_table(rows, ["backend", "gpus", "mismatch_tokens", "mismatch_abs_mean", "token_mult_prob_error", "mismatch_k3",
                       "mismatch_max", "max_vllm_decode_vs_prefill", "max_vllm_bf16_vs_fp32", "mean_token_prob", "ok"]))
    path = write_result("gpu_learner_check", {"model": str(cfg.demo.model_dump()), "overrides": args.overrides,
                                              "rows": rows}, args.commit)
    if args.out:
        Path(args.out, "gpu_learner_check.json").write_text(json.dumps(rows, indent=2))
    print(f"-> {path}")


if __name__ == "__main__":
    main()
