"""GPU check of the learner group (2 GPUs): FSDP2 and DeepSpeed ZeRO-3 train a Qwen2-shaped model in
bf16; the HF export loads in vLLM and vLLM's log-probs match the learner's on a peaked model.

    python -m benchmarks.gpu_learner_check [--backends fsdp,zero3] [--out DIR] [key=value ...]
    (needs 2 GPUs; overrides such as model.lm_head_fp32=true apply to learners and vLLM alike)
"""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

import ray

from benchmarks.common import benchmark_parser, print_table, run_outside_ray, write_result
from rayrl.actors import LearnerGroup
from rayrl.config import load_config
from rayrl.engines.rollout.vllm_async import head_overrides
from rayrl.models import build_model
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
    if dtype == "bfloat16":  # the rollout path: greedy decoding, one log-prob per sampled token
        outs = llm.generate([{"prompt_token_ids": p} for p in prompts],
                            SamplingParams(temperature=0.0, max_tokens=n, logprobs=0, ignore_eos=True))
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
    """vLLM in its own process, outside the Ray driver (an engine started inside it hung here): greedy
    bf16 sequences with their decode log-probs, rescored by a bf16 and an fp32 prefill pass."""
    overrides = json.dumps(head_overrides(lm_head_fp32))
    out = run_outside_ray(VLLM_SCRIPT, [model_dir, json.dumps(prompts), str(n_tokens), overrides], "VLLM_RESULT ",
                          timeout_s=300)
    return json.loads(out)


def _gap(a: list[list[float]], b: list[list[float]]) -> tuple[float, float]:
    diffs = [abs(x - y) for ra, rb in zip(a, b) for x, y in zip(ra, rb)]
    return max(diffs), sum(diffs) / len(diffs)


def check(backend: list[str], base: Path, prompts: list[list[int]], overrides: list[str]) -> dict:
    name = backend[0].split("=")[1]
    cfg = load_config(None, ["cluster.n_gpus_per_node=2", "learner.num_workers=2", "learner.dtype=bfloat16",
                             "learner.lr=1e-5", "rollout.temperature=1.0", f"model.path={base}", *backend, *overrides])
    plan = PlacementPlan(cfg, name=f"check-{name}", learner_only=True)
    plan.create()
    group = LearnerGroup(cfg, str(base), plan)
    try:
        groups = [TrajectoryGroup(Task(str(i), "", "0"), [
            Sample(str(i), p, [4 + (i + j) % 10 for j in range(8)], [-1.0] * 8, [0] * 8, "length",
                   reward=float(k % 2)) for k in range(4)]) for i, p in enumerate(prompts)]
        items = [[ray.put(g)] for g in groups]
        losses = [group.train(items)["loss"] for _ in range(3)]
        export = base.parent / f"export-{name}"
        group.save(str(export))
        vllm = vllm_scores(str(export), prompts, 8, cfg.model.lm_head_fp32)
        seqs = vllm["decode"]
        probe = [TrajectoryGroup(Task(str(i), "", "0"), [Sample(str(i), p, toks, lps, [0] * len(toks), "length")])
                 for i, (p, (toks, lps)) in enumerate(zip(prompts, seqs))]
        learner_lp = group.completion_logprobs(probe)
    finally:
        group.kill()
        plan.remove()
    decode = [lps for _, lps in seqs]
    row = {"backend": name, "losses": losses, "tokens_compared": sum(map(len, decode)),
           "mean_token_prob": sum(math.exp(x) for r in decode for x in r) / sum(map(len, decode))}
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
    p.add_argument("--out", default=None)
    p.add_argument("overrides", nargs="*", help="config overrides, key=value")
    args = p.parse_args()
    work = Path(tempfile.mkdtemp())
    # the arithmetic policy built from config and warmed up: trained, so its next-token
    # distributions are peaked (a random model's are near-uniform and would prove little)
    cfg = load_config(None, [f"model.cache_dir={work}"])
    base = build_model(cfg)
    from rayrl.data import PromptTemplate, split
    from transformers import AutoTokenizer

    template = PromptTemplate(AutoTokenizer.from_pretrained(base))
    prompts = [template.encode(t) for t in split(cfg.data)[1][:16]]
    ray.init(address="local", num_gpus=2, include_dashboard=False)
    rows = [check(BACKENDS[b], base, prompts, args.overrides) for b in args.backends.split(",")]
    ray.shutdown()
    for r in rows:
        r["ok"] = r["max_logprob_diff"] <= 0.02 and all(math.isfinite(x) for x in r["losses"])
    print_table(rows, ["backend", "max_logprob_diff", "mean_logprob_diff", "max_vs_vllm_bf16_prefill",
                       "max_vllm_decode_vs_prefill", "max_vs_vllm_fp32", "max_vllm_bf16_vs_fp32", "mean_token_prob",
                       "ok"])
    path = write_result("gpu_learner_check", {"model": str(cfg.model.build.model_dump()), "overrides": args.overrides,
                                              "rows": rows}, args.commit)
    if args.out:
        Path(args.out, "gpu_learner_check.json").write_text(json.dumps(rows, indent=2))
    print(f"-> {path}")


if __name__ == "__main__":
    main()
