"""rollout.fleet=elastic on a cluster whose nodes come and go (ray.cluster_utils.Cluster, one machine): a node
added mid-run gets a rollout worker that holds the current weights and produces groups; drained (Ray's drain API,
with a deadline) it leaves within the deadline; a second node added and then killed without notice takes its
worker, the run goes on, and a third node replaces it. Nothing is lost or trained twice, and every step's samples
score as the learner does. A second run, asynchronous with generation ahead of training, sees its joined worker
leave as idle and no worker start again while generation stays ahead. A third freezes a joined worker's node
(SIGSTOP) while it holds prompts until Ray declares the node dead, then wakes the worker for 3 s before its
raylet: its hand-overs for the requeued prompts are dropped and counted as late, and the run ends normally."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# its own process: the test session already has a (one-node) cluster, and a process joins only one
SCRIPT = r"""
import json, signal, sys, threading, time
import psutil
import ray
from ray.cluster_utils import Cluster
from ray.core.generated import autoscaler_pb2
from rayrl.config import load_config
from rayrl.placement import PlacementPlan
from rayrl.trainer import train

cfg = load_config(None, sys.argv[3:])
head_cpus = PlacementPlan(cfg).total_cpus  # the run's placement group fills the head: no room for a second worker
# a frozen node is declared dead after 5 missed health checks a second apart (the default waits about 30 s)
checks = {"health_check_period_ms": 1000, "health_check_timeout_ms": 1000, "health_check_failure_threshold": 5}
cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": head_cpus, "include_dashboard": False,
                                                        "_system_config": checks if sys.argv[2] == "frozen" else {}})
ray.init(address=cluster.address)
metrics = sys.argv[1]
events = []

def last(key):
    try:
        lines = open(metrics).read().splitlines()
    except FileNotFoundError:
        return None
    recs = [json.loads(l) for l in lines if l.endswith("}")]  # a line being written is left for the next look
    recs = [r for r in recs if "step" in r]
    return recs[-1].get(key) if recs else None

def trained_by(worker):
    try:
        lines = open(metrics.replace("metrics.jsonl", "trained.jsonl")).read().splitlines()
    except FileNotFoundError:
        return False
    return any(worker in json.loads(l)["workers"] for l in lines if l.endswith("}"))

def producing(worker):  # its groups are trained; then the driver's fleet checks (every 0.5 s) see its first one
    wait_for(lambda: trained_by(worker))
    time.sleep(2)

def wait_for(what, timeout=240):
    t0 = time.time()
    while not what():
        if time.time() - t0 > timeout:
            raise TimeoutError(f"{len(events)} events, then waited {timeout} s")
        time.sleep(0.2)

def drain(node, seconds):
    gcs = ray._raylet.GcsClient(address=cluster.address)
    reason = autoscaler_pb2.DrainNodeReason.Value("DRAIN_NODE_REASON_PREEMPTION")
    return gcs.drain_node(node.node_id, reason, "a preemptible node's notice", int((time.time() + seconds) * 1000))

def join_a_node(worker):  # a node added: its worker joins and its groups are trained
    node = cluster.add_node(num_cpus=1)
    events.append({"added": node.node_id, "at": time.time()})
    wait_for(lambda: last("fleet_size") == 2)
    producing(worker)
    return node

def scenario():
    try:
        wait_for(lambda: (last("step") or 0) >= 3)
        first = join_a_node("rollout-1")
        start = last("step")
        wait_for(lambda: last("step") >= start + 4)  # a few steps with two workers
        events.append({"drain": first.node_id, "at": time.time(), "accepted": drain(first, 30)[0]})
        wait_for(lambda: last("fleet_size") == 1)
        cluster.remove_node(first)  # what the preemption does at the deadline
        second = join_a_node("rollout-2")
        cluster.remove_node(second, allow_graceful=False)  # no notice
        events.append({"killed": second.node_id, "at": time.time()})
        wait_for(lambda: last("fleet_size") == 1)
        join_a_node("rollout-3")  # capacity returns: the lost worker is replaced there
        events.append({"done": True, "at": time.time()})
    except Exception as err:  # the test names it
        events.append({"error": repr(err)})

def idle_scenario():
    try:
        wait_for(lambda: (last("step") or 0) >= 3)
        join_a_node("rollout-1")
        wait_for(lambda: last("fleet_size") == 1)  # generation ahead for a window: the joined worker leaves
        left = last("step")
        wait_for(lambda: last("step") >= left + 20)  # the node has room, but generation is still ahead
        events.append({"sizes_after_leave": sorted({r.get("fleet_size") for r in steps_after(left)})})
        events.append({"done": True, "at": time.time()})
    except Exception as err:
        events.append({"error": repr(err)})

def node_processes(node):  # the node's raylet and agents and every process they started (workers, engines)
    roots = [psutil.Process(info.process.pid) for infos in node.all_processes.values() for info in infos]
    return {p.pid: p for root in roots for p in [root, *root.children(recursive=True)]}

def signal_all(procs, sig):
    for p in procs:
        try:
            p.send_signal(sig)
        except psutil.NoSuchProcess:
            pass

def frozen_scenario():
    try:
        wait_for(lambda: (last("step") or 0) >= 3)
        node = join_a_node("rollout-1")
        buffer = ray.get_actor("buffer", namespace=f"rayrl-{run.metrics.run_name}")
        procs = node_processes(node)
        for _ in range(100):  # frozen at a moment rollout-1 holds prompts (a stopped worker hands none over)
            signal_all(procs.values(), signal.SIGSTOP)
            time.sleep(1)  # a hand-over already on its way lands first
            held = ray.get(buffer.stats.remote())["leased_by_worker"].get(1, 0)
            if held:
                break
            signal_all(procs.values(), signal.SIGCONT)
            time.sleep(0.02)
        events.append({"frozen": node.node_id, "held": held, "at": time.time()})
        wait_for(lambda: last("fleet_size") == 1)  # Ray declared the node dead; the fleet requeued its prompts
        raylet = node.all_processes["raylet"][0].process.pid
        signal_all([p for pid, p in procs.items() if pid != raylet], signal.SIGCONT)  # the worker wakes, cut off
        time.sleep(3)
        signal_all(procs.values(), signal.SIGCONT)  # the raylet learns it was declared dead and exits
        cluster.remove_node(node, allow_graceful=False)
        start = last("step")
        wait_for(lambda: last("step") >= start + 4)  # the run goes on after the wake-up
        events.append({"done": True, "at": time.time()})
    except Exception as err:
        events.append({"error": repr(err)})

def steps_after(step):
    recs = [json.loads(l) for l in open(metrics).read().splitlines() if l.endswith("}")]
    return [r for r in recs if r.get("step", 0) > step]

out = {}
run = load_config(None, sys.argv[3:] + ["scheduler.type=ray", f"scheduler.address={cluster.address}"])
trainer = threading.Thread(target=lambda: out.update(train(run)))  # nodes start from the main thread (signals)
trainer.start()
{"main": scenario, "idle": idle_scenario, "frozen": frozen_scenario}[sys.argv[2]]()
trainer.join()
summary = out
print("RESULT " + json.dumps({"summary": {k: summary[k] for k in ("steps", "groups", "fleet")}, "events": events}))
ray.shutdown()
cluster.shutdown()
"""


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _run(run_dir: Path, scenario: str, model_cache, steps: int, *extra: str) -> tuple[dict, list]:
    """The script in its own process: the run's summary (steps, groups, fleet) and the scenario's events."""
    args = [f"demo.cache_dir={model_cache}", f"metrics.run_dir={run_dir.parent}", f"metrics.run_name={run_dir.name}",
            "metrics.progress=false", "rollout.batch_size=8", "rollout.group_size=4", "data.eval_size=16",
            f"learner.total_steps={steps}", "checkpoint.save_final=false", "checkpoint.every_steps=0",
            "algorithm.dynamic_sampling=false", "rollout.fleet=elastic", "rollout.max_workers=2",
            "rollout.fleet_check_s=0.5", "scheduler.include_dashboard=false", *extra]
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(run_dir / "metrics.jsonl"), scenario, *args], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=900)
    lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    result = json.loads(lines[-1].removeprefix("RESULT "))
    assert any(e.get("done") for e in result["events"]), result["events"]  # every phase happened in the run
    return result["summary"], result["events"]


def _nothing_lost(summary: dict, run_dir: Path, steps: int) -> list[dict]:
    """The ledger balances and every trained task id is distinct; returns the trained records."""
    g = summary["groups"]
    assert g["produced"] == g["trained"] + g["unused"] + g["failed"] + g["dropped_stale"] + g["equal_rewards"], g
    trained = _lines(run_dir / "trained.jsonl")
    ids = [t for rec in trained for t in rec["tasks"]]
    assert len(ids) == len(set(ids)) == steps * 8, "a task was trained twice or a step lost groups"
    return trained


def test_workers_join_new_nodes_leave_drained_and_lost_ones_and_nothing_is_lost(tmp_path, model_cache):
    run_dir = tmp_path / "elastic"
    # η = 0, steps take ~0.06 s: the run must outlast the scenario (node starts, a drain, a death seen), ~40 s
    summary, events = _run(run_dir, "main", model_cache, 700, "rollout.max_staleness=0")
    fleet = summary["fleet"]
    joins, leaves = fleet["joins"], fleet["leaves"]
    assert [j["worker"] for j in joins] == ["rollout-1", "rollout-2", "rollout-3"], joins
    assert all(j["first_group_s"] is not None for j in joins), joins
    assert [(x["worker"], x["why"]) for x in leaves] == [("rollout-1", "drained"), ("rollout-2", "lost")], leaves
    assert leaves[0]["within_deadline"], leaves[0]
    assert isinstance(leaves[1]["requeued"], int), leaves[1]  # the lost worker's prompts given back
    assert summary["groups"]["late"] == 0  # no hand-over from a worker that no longer held its prompts
    assert fleet["size"] == 2  # the third node's worker, beside the placement group's
    trained = _nothing_lost(summary, run_dir, 700)
    # the joined workers generated with the current weights: at η = 0 every trained token is fresh, and each
    # step's worst gap to the learner's log-probs (fp32) stays at rounding, the steps with their groups included
    by_step = {r["step"]: r for r in _lines(run_dir / "metrics.jsonl") if "step" in r}
    joined_steps = {rec["step"] for rec in trained if {"rollout-1", "rollout-2", "rollout-3"} & set(rec["workers"])}
    assert joined_steps, "no group of a joined worker was trained"
    assert max(by_step[s]["mismatch_max"] for s in by_step) <= 1e-5
    one = [r["samples"] / r["step_s"] for r in by_step.values() if r["fleet_size"] == 1]
    two = [r["samples"] / r["step_s"] for r in by_step.values() if r["fleet_size"] == 2]
    print(f"first group after a node appeared: {[round(j['first_group_s'], 1) for j in joins]} s; drained worker "
          f"left in {leaves[0]['left_s']:.1f} s of a {leaves[0]['deadline_s']:.0f} s deadline; samples/s with one "
          f"worker {statistics.median(one):.0f}, with two {statistics.median(two):.0f}")


def test_a_joined_worker_leaves_when_generation_runs_ahead_and_none_starts_while_it_does(tmp_path, model_cache):
    # η = 4 and a learner made slow (eight optimizer steps a batch, small micro-batches, one thread): it never waits
    run_dir = tmp_path / "idle"
    summary, events = _run(run_dir, "idle", model_cache, 200, "rollout.max_staleness=4", "rollout.idle_leave_s=3",
                           "learner.minibatches=8", "learner.max_tokens_per_micro_batch=64", "learner.threads=1")
    fleet = summary["fleet"]
    assert [j["worker"] for j in fleet["joins"]] == ["rollout-1"], fleet["joins"]
    assert [(x["worker"], x["why"]) for x in fleet["leaves"]] == [("rollout-1", "idle")], fleet["leaves"]
    assert fleet["leaves"][0]["busy_share"] * 2 <= 0.8, fleet["leaves"][0]
    assert [e["sizes_after_leave"] for e in events if "sizes_after_leave" in e] == [[1]], events
    assert fleet["size"] == 1
    _nothing_lost(summary, run_dir, 200)
    print(f"idle worker left after a window with each worker busy {fleet['leaves'][0]['busy_share']:.0%}")


def test_a_frozen_node_declared_dead_hands_over_nothing_when_it_wakes(tmp_path, model_cache):
    run_dir = tmp_path / "frozen"
    summary, events = _run(run_dir, "frozen", model_cache, 700, "rollout.max_staleness=0")
    held = [e["held"] for e in events if "frozen" in e]
    assert held and held[0] > 0, events
    leaves = summary["fleet"]["leaves"]
    assert [(x["worker"], x["why"]) for x in leaves] == [("rollout-1", "lost")], leaves
    assert leaves[0]["requeued"] >= held[0], leaves  # what it held at the freeze went back to the queue
    g = summary["groups"]
    assert 1 <= g["late"] <= leaves[0]["requeued"], g  # its hand-overs after the wake-up: dropped and counted
    _nothing_lost(summary, run_dir, 700)
    print(f"frozen holding {held[0]} prompts; {leaves[0]['requeued']} requeued; {g['late']} late hand-overs dropped")
