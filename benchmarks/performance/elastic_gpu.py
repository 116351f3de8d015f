"""The elastic rollout fleet on three GPUs or more: rollout workers join and leave a running job while the NCCL
weight-sync group re-forms around them, and nothing is lost or trained twice.

One machine stands in for a cluster whose nodes come and go (ray.cluster_utils.Cluster): the head node holds
GPUs 0 and 1 (the learner and the placement group's rollout worker); a node added mid-run holds GPU 2 (Ray maps
a node's GPU ids from CUDA_VISIBLE_DEVICES when it starts), and gets a vLLM worker that joins the sync group
at the current weights. The scenario: a node joins; after a few steps it is drained (Ray's drain API with a
30 s deadline, as a preemption notice) and removed; a node joins again and is killed without notice; the run
finishes its steps. Checked: the ledger balances, every task id is trained once, every join and leave is in
the summary; reported: each join's seconds to ready and to its first group, the steps' sample rate with one
and two workers.

    python -m benchmarks.performance.elastic_gpu --commit SHA [--steps 300] [key=value ...]
    python -m benchmarks.performance.elastic_gpu --cpu --steps 600   # CPU smoke run: the demo model, gloo
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

import ray
import torch
from ray.cluster_utils import Cluster
from ray.core.generated import autoscaler_pb2

from benchmarks.common import benchmark_parser, print_table, write_result
from rayrl.config import load_config
from rayrl.models.tokenizer import TEXT_CHARS
from rayrl.placement import PlacementPlan
from rayrl.testing.random_qwen2 import QWEN2_0_5B_SHAPE, save_random_qwen2
from rayrl.trainer import train


def settings(model: Path | None, run_dir: Path, steps: int) -> list[str]:
    """A split run that keeps stepping while workers come and go: the 0.5B shape, vLLM eager (a joined engine
    starts sooner), η = 1; without a model (--cpu), the demo model on the hf engine over gloo."""
    gpu = ["cluster.n_gpus_per_node=2", "rollout.engine=vllm", f"model.path={model}", "vllm.dtype=bfloat16",
           "vllm.enforce_eager=true", "vllm.max_model_len=512", "vllm.gpu_memory_utilization=0.85",
           "rollout.ignore_eos=true", "rollout.max_new_tokens=128", "rollout.batch_size=32", "rollout.group_size=8",
           "learner.backend=fsdp", "learner.dtype=bfloat16", "sync.transport=nccl", "sync.dtype=bfloat16"]
    cpu = ["cluster.n_gpus_per_node=0", "rollout.batch_size=8", "rollout.group_size=4", f"demo.cache_dir={run_dir.parent}"]
    return [*(gpu if model else cpu), "placement.mode=split", "rollout.temperature=1.0", "rollout.max_staleness=1",
            "rollout.fleet=elastic", "rollout.max_workers=2", "rollout.fleet_check_s=1", "rollout.idle_leave_s=0",
            "learner.lr=1e-6", "algorithm.beta=0", "algorithm.dynamic_sampling=false", "data.eval_size=16",
            f"learner.total_steps={steps}", "eval.every_steps=0", "checkpoint.every_steps=0",
            "checkpoint.save_final=false", f"metrics.run_dir={run_dir.parent}", f"metrics.run_name={run_dir.name}",
            "metrics.progress=false", "scheduler.include_dashboard=false"]


class Scenario:
    """Adds, drains and kills the third GPU's node while the run steps, from the main thread."""

    def __init__(self, cluster: Cluster, run_dir: Path, cpus: float, gpus: bool) -> None:
        self.cluster, self.metrics, self.cpus, self.gpus = cluster, run_dir / "metrics.jsonl", cpus, gpus
        self.events: list[dict] = []

    def records(self) -> list[dict]:
        if not self.metrics.exists():
            return []
        return [json.loads(line) for line in self.metrics.read_text().splitlines() if line.endswith("}")]

    def last(self, key: str):
        steps = [r for r in self.records() if "step" in r]
        return steps[-1].get(key) if steps else None

    def wait_for(self, what, timeout_s: float = 300) -> None:
        t0 = time.time()
        while not what():
            if time.time() - t0 > timeout_s:
                raise TimeoutError(f"after {len(self.events)} events, waited {timeout_s} s")
            time.sleep(0.5)

    def add_gpu_node(self):
        if not self.gpus:
            node = self.cluster.add_node(num_cpus=self.cpus)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = "2"  # the node's GPU ids come from the process that starts it
            try:
                node = self.cluster.add_node(num_cpus=self.cpus, num_gpus=1, env_vars={"CUDA_VISIBLE_DEVICES": "2"})
            finally:
                del os.environ["CUDA_VISIBLE_DEVICES"]
        self.events.append({"added": node.node_id, "step": self.last("step"), "at": time.time()})
        self.wait_for(lambda: self.last("fleet_size") == 2)
        return node

    def drain(self, node, seconds: float) -> bool:
        gcs = ray._raylet.GcsClient(address=self.cluster.address)
        reason = autoscaler_pb2.DrainNodeReason.Value("DRAIN_NODE_REASON_PREEMPTION")
        return gcs.drain_node(node.node_id, reason, "a preemption notice", int((time.time() + seconds) * 1000))[0]

    def run(self) -> None:
        try:
            self.wait_for(lambda: (self.last("step") or 0) >= 3)
            node = self.add_gpu_node()
            start = self.last("step")
            self.wait_for(lambda: self.last("step") >= start + 10)  # steps with two workers
            self.events.append({"drain": node.node_id, "step": self.last("step"), "accepted": self.drain(node, 30)})
            self.wait_for(lambda: self.last("fleet_size") == 1)
            self.cluster.remove_node(node)  # what the preemption does at its deadline
            node = self.add_gpu_node()
            start = self.last("step")
            self.wait_for(lambda: self.last("step") >= start + 5)
            self.cluster.remove_node(node, allow_graceful=False)  # lost without notice
            self.events.append({"killed": node.node_id, "step": self.last("step"), "at": time.time()})
            self.wait_for(lambda: self.last("fleet_size") == 1)
            self.events.append({"done": True, "step": self.last("step")})
        except Exception as err:  # noqa: BLE001 - reported in the result, the run still finishes
            self.events.append({"error": repr(err)})


def checks(summary: dict, run_dir: Path, batch: int) -> dict:
    """The ledger, each task id trained once, the fleet's joins and leaves."""
    g = summary["groups"]
    balanced = g["produced"] == g["trained"] + g["unused"] + g["failed"] + g["dropped_stale"] + g["equal_rewards"]
    ids = [t for line in (run_dir / "trained.jsonl").read_text().splitlines() for t in json.loads(line)["tasks"]]
    fleet = summary["fleet"]
    return {"ledger_balanced": balanced, "trained_ids": len(ids), "distinct_ids": len(set(ids)),
            "all_steps_full": len(ids) == summary["steps"] * batch, "joins": len(fleet["joins"]),
            "leaves": [leave.get("why") for leave in fleet["leaves"]]}


def rates(records: list[dict]) -> dict:
    """Median samples/s of the steps run with one and with two rollout workers."""
    out = {}
    for size in (1, 2):
        steps = [r["samples_per_s"] for r in records if r.get("fleet_size") == size and "samples_per_s" in r]
        out[f"samples_per_s_{size}_workers"] = statistics.median(steps) if steps else None
    return out


def main() -> None:
    p = benchmark_parser(__doc__)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--cpu", action="store_true", help="a smoke run of the script on CPU (the demo model, gloo)")
    p.add_argument("overrides", nargs="*")
    args = p.parse_args()
    if not args.cpu and torch.cuda.device_count() < 3:
        raise SystemExit(f"elastic_gpu needs 3 GPUs (this machine has {torch.cuda.device_count()}); --cpu: smoke run")
    work = Path(tempfile.mkdtemp())
    model = None if args.cpu else save_random_qwen2(work / "model", chars=TEXT_CHARS, **QWEN2_0_5B_SHAPE)
    run_dir = work / "runs" / "elastic-gpu"
    overrides = settings(model, run_dir, args.steps) + args.overrides
    cfg = load_config(None, overrides)
    os.environ["CUDA_VISIBLE_DEVICES"] = "0,1"  # the head node: the learner's GPU and the fixed worker's
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": PlacementPlan(cfg).total_cpus, "num_gpus": 0 if args.cpu else 2, "include_dashboard": False})
    del os.environ["CUDA_VISIBLE_DEVICES"]
    ray.init(address=cluster.address)
    run = load_config(None, overrides + ["scheduler.type=ray", f"scheduler.address={cluster.address}"])
    scenario, out = Scenario(cluster, run_dir, cfg.rollout.cpus_per_worker, not args.cpu), {}
    trainer = threading.Thread(target=lambda: out.update(train(run)))  # nodes start from the main thread
    trainer.start()
    scenario.run()
    trainer.join()
    ray.shutdown()
    cluster.shutdown()
    if not out:
        raise SystemExit(f"the run did not finish; scenario events: {scenario.events}")
    result = {**checks(out, run_dir, cfg.rollout.batch_size), **rates(scenario.records()),
              "completed": any(e.get("done") for e in scenario.events),
              "joins_s": [{k: j.get(k) for k in ("node", "ready_s", "first_group_s")} for j in out["fleet"]["joins"]],
              "rollout_restarts": out["rollout_restarts"]}
    print_table([result], ["completed", "ledger_balanced", "trained_ids", "distinct_ids", "all_steps_full", "joins",
                           "leaves", "samples_per_s_1_workers", "samples_per_s_2_workers"])
    path = write_result("elastic_gpu", {"summary": result, "events": scenario.events, "fleet": out["fleet"],
                                        "groups": out["groups"], "settings": overrides}, args.commit)
    print("->", path)


if __name__ == "__main__":
    main()
