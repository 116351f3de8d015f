"""Two nodes on one machine (ray.cluster_utils.Cluster): placement puts the learner on the node
labelled for it and the rollout worker on the other, by config alone; the run completes, and a
second run of the same name resumes its checkpoint on the same two nodes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# its own process: the test session already has a (one-node) cluster, and a process joins only one
SCRIPT = r"""
import json, sys
import ray
from ray.cluster_utils import Cluster
from rayrl.config import load_config
from rayrl.trainer import train

cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "labels": {"rayrl-role": "learner"},
                                                        "include_dashboard": False})
rollout_node = cluster.add_node(num_cpus=2, labels={"rayrl-role": "rollout"})
ray.init(address=cluster.address)
labels = {n["NodeID"]: n["Labels"].get("rayrl-role") for n in ray.nodes()}
out = []
for steps in (2, 4):  # the second run resumes the first one's step-2 checkpoint
    cfg = load_config(None, sys.argv[1:] + [f"learner.total_steps={steps}", "scheduler.type=ray",
                                            f"scheduler.address={cluster.address}"])
    s = train(cfg)
    out.append({"steps": s["steps"], "resumed_from": s["resumed_from"],
                "roles": {role: [labels[n] for n in ids] for role, ids in s["nodes"].items()}})
print("RESULT " + json.dumps(out))
ray.shutdown()
cluster.shutdown()
"""


def test_learner_and_rollout_on_different_nodes_complete_and_resume(tmp_path, model_cache):
    args = [f"demo.cache_dir={model_cache}", f"metrics.run_dir={tmp_path}", "metrics.run_name=two-nodes",
            "metrics.progress=false", "rollout.batch_size=8", "rollout.group_size=4", "data.eval_size=16",
            "checkpoint.every_steps=2", "checkpoint.save_final=false",
            "placement.learner_node_labels={rayrl-role: learner}", "placement.rollout_node_labels={rayrl-role: rollout}"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    proc = subprocess.run([sys.executable, "-c", SCRIPT, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    first, second = json.loads(lines[-1].removeprefix("RESULT "))
    for run in (first, second):
        assert run["roles"]["learner"] == ["learner"] and run["roles"]["rollout"] == ["rollout"], run
    assert first["steps"] == 2 and first["resumed_from"] == ""
    assert second["steps"] == 4 and second["resumed_from"].endswith("step-00000002")
