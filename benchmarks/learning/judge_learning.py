"""The arithmetic recipe trained by the demo judge alone against the same run trained by exact match, in
alternating order, --runs pairs of learning_repeats' 150-step run: held-out accuracy (exact match) before and
after, the judge's agreement with exact match on the held-out answers, and its engine calls per step against the
reward actors' calls.

    python -m benchmarks.learning.judge_learning [--runs 3] [key=value ...]
"""

from __future__ import annotations

import json

import ray

from benchmarks.common import benchmark_parser, print_table, spread, write_result
from benchmarks.learning.learning_repeats import TEST_RUN
from rayrl.config import load_config
from rayrl.driver import start_ray
from rayrl.placement import PlacementPlan
from rayrl.trainer import train

JUDGE = ["reward.model.kind=judge", "reward.model.template='{answer} vs {reference}?'", "reward.model.combine=only",
         "reward.model.max_new_tokens=1", "reward.model.parser=rayrl.rewards.verdicts:yes_or_no"]


def one_run(reward: str, i: int, overrides: list[str]) -> dict:
    extra = JUDGE if reward == "judge" else []
    cfg = load_config(None, [*TEST_RUN, *extra, *overrides, f"metrics.run_name=judge-learning-{reward}-{i}"])
    start_ray(cfg.scheduler, PlacementPlan(cfg).total_cpus)
    try:
        s = train(cfg)
    finally:
        ray.shutdown()
    row = {"run": i, "reward": reward, "eval_before": s["eval_accuracy_before"], "eval_after": s["eval_accuracy_after"],
           "eval_gain": s["eval_accuracy_after"] - s["eval_accuracy_before"], "wall_s": s["wall_s"]}
    if reward == "judge":
        m = s["reward_model"]
        row.update(agreement_before=m["agreement"][0], agreement_after=m["agreement"][-1],
                   engine_calls_per_step=m["engine_calls_per_step"], reward_calls_per_step=m["reward_calls_per_step"],
                   unparsable=m["unparsable"], reward_model_failures=sum(
                       s["reward_failures"][k] for k in ("unparsable", "model_timeout", "model_error")))
    return row


def main() -> None:
    p = benchmark_parser(__doc__)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("overrides", nargs="*")
    args = p.parse_args()
    rows = []
    for i in range(args.runs):
        for reward in (("exact", "judge") if i % 2 == 0 else ("judge", "exact")):
            rows.append(one_run(reward, i, args.overrides))
            print(rows[-1], flush=True)
    print_table(rows, list(dict.fromkeys(k for r in rows for k in r)))
    by = {r: [x for x in rows if x["reward"] == r] for r in ("exact", "judge")}
    summary = {f"{r}_{k}": spread([x[k] for x in xs]) for r, xs in by.items() for k in ("eval_after", "eval_gain")}
    summary["judge_agreement_after"] = spread([x["agreement_after"] for x in by["judge"]])
    summary["judge_minus_exact_after"] = summary["judge_eval_after"]["median"] - summary["exact_eval_after"]["median"]
    path = write_result("judge_learning", {"config": [*TEST_RUN, *JUDGE, *args.overrides], "runs": rows, **summary},
                        args.commit)
    print(json.dumps(summary, indent=1), "->", path)


if __name__ == "__main__":
    main()
