"""Expected scaling to several 8-GPU nodes, on paper: split placement's samples/s from measured one-GPU rates
and a sync cost, for what the lent machines cannot show. Nothing here is measured; every input is.

Per step of B samples (C completion tokens, P + C trained tokens each), with R rollout GPUs and L learner GPUs:
    generation  B·C / (R·g)          g: one GPU's generation tokens/s (rollout_throughput, rayrl's row)
    training    B·(P+C) / (L·t·e)    t: one GPU's learner tokens/s (learner_mfu, its best row); e: data-parallel
                                     efficiency, --dp-efficiency (learner_mfu --ranks measures it)
    sync        bytes / bandwidth    NVLink inside a node (nccl_sync's raw broadcast when measured, else
                                     --nvlink-gbs), the NIC across nodes (--nic-gbs, an assumption)
    η = 0: step = generation + training + sync;  η > 0: step = max(generation, training + sync)
For each node count the best split R : L is searched; B grows with the nodes (weak scaling, --batch per node).
Beside them the colocated η = 0 (every GPU generates, then trains: R = L = all GPUs, plus --switch-s a step
for vLLM's sleep and wake), the stronger synchronous layout on one node.

    python -m benchmarks.performance.scaling_model --rollout R.json --learner L.json [--nccl N.json] [--nodes 1,2,4,8]
"""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.common import benchmark_parser, print_table, write_result


def rates(rollout: dict, learner: dict) -> tuple[float, float, int]:
    """One GPU's generation tokens/s (rayrl's worker), its learner tokens/s (the best row) and the completion
    length the generation rate was measured at."""
    gen = next(r["tok_s_median"] for r in rollout["rows"] if r["engine"].startswith("rayrl"))
    return gen, max(r["tokens_per_s"] for r in learner["rows"]), rollout["max_new_tokens"]


def step_s(split: tuple[int, int], batch: int, prompt: int, completion: int, gen: float, train: float,
           sync: float, eta: int) -> float:
    rollout_gpus, learner_gpus = split
    generation = batch * completion / (rollout_gpus * gen)
    training = batch * (prompt + completion) / (learner_gpus * train)
    return generation + training + sync if eta == 0 else max(generation, training + sync)


def best(nodes: int, per_node: int, batch: int, prompt: int, completion: int, gen: float, train: float,
         sync: float, eta: int) -> dict:
    """The split R : L with the most samples/s on nodes x per_node GPUs."""
    gpus = nodes * per_node
    options = [((r, gpus - r), batch / step_s((r, gpus - r), batch, prompt, completion, gen, train, sync, eta))
               for r in range(1, gpus)]
    (r, n_learn), rate = max(options, key=lambda o: o[1])
    return {"split": f"{r}:{n_learn}", "samples_per_s": rate}


def main() -> None:
    p = benchmark_parser(__doc__)
    p.add_argument("--rollout", required=True, type=Path, help="a rollout_throughput result (the model's shape)")
    p.add_argument("--learner", required=True, type=Path, help="a learner_mfu result (the same shape)")
    p.add_argument("--nccl", type=Path, help="an nccl_sync result: its raw broadcast sets the NVLink rate")
    p.add_argument("--bytes", type=float, default=3.09e9, help="the weights a sync sends (1.5B shape, bf16)")
    p.add_argument("--prompt", type=int, default=256, help="prompt tokens per sample")
    p.add_argument("--batch", type=int, default=256, help="samples per step per node")
    p.add_argument("--gpus-per-node", type=int, default=8)
    p.add_argument("--nodes", default="1,2,4,8")
    p.add_argument("--dp-efficiency", type=float, default=0.9, help="learner ranks' efficiency, unmeasured")
    p.add_argument("--nvlink-gbs", type=float, default=150.0, help="GB/s of a broadcast inside a node, unmeasured")
    p.add_argument("--nic-gbs", type=float, default=50.0, help="GB/s between nodes (400 Gb/s), an assumption")
    p.add_argument("--switch-s", type=float, default=0.3, help="colocated: vLLM's sleep and wake a step, unmeasured")
    args = p.parse_args()
    rollout, learner = (json.loads(f.read_text()) for f in (args.rollout, args.learner))
    gen, one_gpu, completion = rates(rollout, learner)
    train = one_gpu * args.dp_efficiency  # a learner GPU's share of a data-parallel group
    nvlink = args.nvlink_gbs * 1e9
    if args.nccl:
        raw = json.loads(args.nccl.read_text())["summary"]
        nvlink = raw["bytes"] / raw["raw_flat_s"]
    rows = []
    for nodes in (int(n) for n in args.nodes.split(",")):
        sync = args.bytes / (nvlink if nodes == 1 else min(nvlink, args.nic_gbs * 1e9))
        batch = args.batch * nodes
        sync_row = best(nodes, args.gpus_per_node, batch, args.prompt, completion, gen, train, sync, 0)
        async_row = best(nodes, args.gpus_per_node, batch, args.prompt, completion, gen, train, sync, 1)
        gpus = nodes * args.gpus_per_node
        colocated = batch / (step_s((gpus, gpus), batch, args.prompt, completion, gen, train, sync, 0)
                             + args.switch_s)
        rows.append({"nodes": nodes, "gpus": gpus, "sync_s": sync, "colocated_samples_per_s": colocated,
                     "eta0_split": sync_row["split"], "eta0_samples_per_s": sync_row["samples_per_s"],
                     "async_split": async_row["split"], "async_samples_per_s": async_row["samples_per_s"],
                     "async_over_eta0": async_row["samples_per_s"] / sync_row["samples_per_s"],
                     "async_over_colocated": async_row["samples_per_s"] / colocated})
    for row in rows:
        row["async_scaling"] = row["async_samples_per_s"] / (rows[0]["async_samples_per_s"] * row["nodes"]
                                                              / rows[0]["nodes"])
    print_table(rows, ["nodes", "gpus", "sync_s", "colocated_samples_per_s", "eta0_split", "eta0_samples_per_s",
                       "async_split", "async_samples_per_s", "async_over_eta0", "async_over_colocated",
                       "async_scaling"])
    inputs = {"gen_tokens_per_s_per_gpu": gen, "learner_tokens_per_s_per_gpu": one_gpu, "completion": completion,
              "prompt": args.prompt, "batch_per_node": args.batch, "bytes": args.bytes,
              "nvlink_gbs": nvlink / 1e9, "nvlink_measured": bool(args.nccl), "nic_gbs": args.nic_gbs,
              "dp_efficiency": args.dp_efficiency, "switch_s": args.switch_s,
              "from": [str(f.name) for f in (args.rollout, args.learner, args.nccl) if f]}
    path = write_result("scaling_model", {"inputs": inputs, "rows": rows}, args.commit)
    print("->", path)


if __name__ == "__main__":
    main()
