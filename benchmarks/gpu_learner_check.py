"""GPU check of the learner group (2 GPUs): FSDP2 and DeepSpeed ZeRO-3 train a Qwen2-shaped model in
bf16; the HF export loads in vLLM and vLLM's log-probs match the learner's on a peaked model.

    python -m benchmarks.gpu_learner_check --out DIR      (run on the GPU machine)
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
from pathlib import Path

import ray

from benchmarks.common import print_table, run_outside_ray, write_result
from rayrl.actors import LearnerGroup
from rayrl.config import load_config
from rayrl.engines.rollout.vllm_async import head_overrides
from rayrl.models import build_model
from rayrl.placement import PlacementPlan
from rayrl.types import GroupMeta, Sample, Task, TrajectoryGroup



VLLM_SCRIPT = """
import json, sys
from vllm import LLM, SamplingParams
model_dir, prompts, n, overrides = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), json.loads(sys.argv[4])
llm = LLM(model=model_dir, dtype="bfloat16", enforce_eager=True, gpu_memory_utilization=0.25, max_model_len=256, seed=0,
          hf_overrides=overrides)  # as the rollout engine runs it (model.lm_head_fp32)
outs = llm.generate([{"prompt_token_ids": p} for p in prompts],
                    SamplingParams(temperature=0.0, max_tokens=n, logprobs=0, ignore_eos=True))
rows = [[list(o.outputs[0].token_ids), [lp[t].logprob for t, lp in zip(o.outputs[0].token_ids, o.outputs[0].logprobs)]]
        for o in outs]
print("VLLM_RESULT " + json.dumps(rows), flush=True)
"""


def vllm_greedy(model_dir: str, prompts: list[list[int]], n_tokens: int, lm_head_fp32: bool):
    """vLLM in its own process, outside the Ray driver (an engine started inside it hung here)."""
    overrides = json.dumps(head_overrides(lm_head_fp32))
    out = run_outside_ray(VLLM_SCRIPT, [model_dir, json.dumps(prompts), str(n_tokens), overrides], "VLLM_RESULT ",
                          timeout_s=240)
    return [tuple(r) for r in json.loads(out)]


def check(backend: list[str], base: Path, prompts: list[list[int]]) -> dict:
    name = backend[0].split("=")[1]
    cfg = load_config(None, ["cluster.n_gpus_per_node=2", "learner.num_workers=2", "learner.dtype=bfloat16",
                             "learner.lr=1e-5", "rollout.temperature=1.0", f"model.path={base}", *backend])
    plan = PlacementPlan(cfg, name=f"check-{name}", learner_only=True)
    plan.create()
    group = LearnerGroup(cfg, str(base), plan)
    try:
        groups = [TrajectoryGroup(Task(str(i), "", "0"), [
            Sample(str(i), p, [4 + (i + j) % 10 for j in range(8)], [-1.0] * 8, [0] * 8, "length",
                   reward=float(k % 2)) for k in range(4)]) for i, p in enumerate(prompts)]
        items = [([ray.put(g)], GroupMeta(g.task.id, 0, 4)) for g in groups]
        losses = [group.train(items)["loss"] for _ in range(3)]
        export = base.parent / f"export-{name}"
        group.save(str(export))
        seqs = vllm_greedy(str(export), prompts, 8, cfg.model.lm_head_fp32)
        probe = [TrajectoryGroup(Task(str(i), "", "0"), [Sample(str(i), p, toks, lps, [0] * len(toks), "length")])
                 for i, (p, (toks, lps)) in enumerate(zip(prompts, seqs))]
        learner_lp = group.completion_logprobs(probe)
    finally:
        group.kill()
        plan.remove()
    vllm_lp = [lp for _, lps in seqs for lp in lps]
    ours = [x for row in learner_lp for x in row]
    diffs = [abs(a - b) for a, b in zip(ours, vllm_lp)]
    return {"backend": name, "losses": losses, "max_abs_logprob_diff": max(diffs),
            "mean_abs_logprob_diff": sum(diffs) / len(diffs),
            "mean_token_prob": sum(math.exp(x) for x in vllm_lp) / len(vllm_lp), "tokens_compared": len(vllm_lp)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
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
    rows = [check(b, base, prompts) for b in (["learner.backend=fsdp"],
                                              ["learner.backend=deepspeed", "learner.zero_stage=3"])]
    ray.shutdown()
    for r in rows:
        r["ok"] = r["max_abs_logprob_diff"] <= 0.02 and all(math.isfinite(x) for x in r["losses"])
    print_table(rows, ["backend", "max_abs_logprob_diff", "mean_abs_logprob_diff", "mean_token_prob",
                       "tokens_compared", "ok"])
    path = write_result("gpu_learner_check", {"model": str(cfg.model.build.model_dump()), "rows": rows})
    if args.out:
        Path(args.out, "gpu_learner_check.json").write_text(json.dumps(rows, indent=2))
    print(f"-> {path}")


if __name__ == "__main__":
    main()
