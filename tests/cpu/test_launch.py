"""Launch modes: rayrl installed non-editable (a wheel in a fresh venv), the recipe started from the repository
root, where the source tree's rayrl/ comes first on the Ray workers' sys.path; and a cluster without rayrl, the
README's `ray start` + `ray job submit --working-dir .` from an empty HOME (token auth on, no token yet), the job's
code carried by the working directory (rayrl/actors and rayrl/placement are links, uploaded as directories)."""

from __future__ import annotations

import json
import os
import re
import signal
import site
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from rayrl.rendezvous import free_port
from tests.conftest import AGENT_BUILD

ROOT = Path(__file__).resolve().parents[2]
ROLES = {"rollout-0", "reward-0", "learner-0", "buffer", "broadcaster"}
# rollout-0's sample counter with both tags (other rollout-0 series, exported earlier, do not count)
SAMPLES = re.compile(r'rayrl_rollout_samples_total\{(?=[^}]*role="rollout")(?=[^}]*worker="rollout-0")')


def _deps_venv(venv: Path) -> tuple[Path, str]:
    """A fresh venv that reuses this environment's dependencies (torch, ray, ...) through a .pth file but not
    this environment's editable rayrl: (its python, its site-packages)."""
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], check=True,
                             capture_output=True, text=True).stdout.strip()
    Path(purelib, "dependencies.pth").write_text(site.getsitepackages()[0] + "\n")
    return python, purelib


def _actor_names(ray_cli: list[str], dashboard: str, env: dict) -> set[str]:
    """Names of the cluster's actors, alive or dead (Ray's state API keeps the dead ones listed)."""
    actors = subprocess.run([*ray_cli, "list", "actors", "--address", dashboard, "--format", "json", "--limit", "1000"],
                            env=env, capture_output=True, text=True, timeout=60)
    if actors.returncode != 0 or not actors.stdout.lstrip().startswith("["):  # else "No resource ..."
        return set()
    return {a.get("name") for a in json.loads(actors.stdout)}


@pytest.fixture(scope="module")
def deps_python(tmp_path_factory) -> Path:
    """A Python with every dependency and no rayrl: the environment of a shared cluster."""
    tmp = tmp_path_factory.mktemp("deps")
    python, _ = _deps_venv(tmp / "venv")
    absent = subprocess.run([python, "-c", "import rayrl"], cwd=tmp, capture_output=True, text=True)
    assert absent.returncode != 0 and "No module named 'rayrl'" in absent.stderr, absent.stderr
    return python


@pytest.fixture(scope="module")
def wheel_python(tmp_path_factory) -> Path:
    """A fresh venv with rayrl installed from its wheel (dependencies reused as in _deps_venv)."""
    tmp = tmp_path_factory.mktemp("wheel")
    wheels = tmp / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(wheels),
                    str(ROOT)], check=True, timeout=300)
    python, purelib = _deps_venv(tmp / "venv")
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", *wheels.glob("rayrl-*.whl")], check=True,
                   timeout=300)
    installed = subprocess.run([python, "-c", "import rayrl.actors; print(rayrl.actors.__file__)"], cwd=tmp,
                               check=True, capture_output=True, text=True).stdout
    assert installed.startswith(purelib), installed
    return python


def _env(**extra: str) -> dict:
    return {**{k: v for k, v in os.environ.items() if not k.startswith("RAY_")}, "RAY_USAGE_STATS_ENABLED": "0",
            **extra}


def _recipe(python: Path, model_cache: Path, runs: Path, name: str, *extra: str) -> list[str]:
    return [str(python), "recipes/arithmetic_grpo.py", "--config", "recipes/arithmetic_grpo.yaml",
            "rollout.batch_size=8", "rollout.group_size=4", "data.eval_size=16", f"demo.cache_dir={model_cache}",
            f"metrics.run_dir={runs}", f"metrics.run_name={name}", "metrics.progress=false",
            "checkpoint.save_final=false", "scheduler.include_dashboard=false", *extra]


def _scrape(port: int) -> str:
    try:
        return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    except OSError:
        return ""


def test_wheel_install_runs_the_recipe_from_the_repository_root(wheel_python, tmp_path, model_cache):
    runs = tmp_path / "runs"
    proc = subprocess.run(_recipe(wheel_python, model_cache, runs, "wheel", "learner.total_steps=3"), cwd=ROOT,
                          env=_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads((runs / "wheel" / "summary.json").read_text())["steps"] == 3


def test_job_submit_to_a_cluster_without_rayrl(deps_python, tmp_path, model_cache):
    """The README's commands, from an empty HOME, on a cluster whose Python has the dependencies but not rayrl:
    generate a token, start a head on 127.0.0.1 (own temp dir and ports), submit the recipe with --working-dir .,
    see its role-named actors (listed while it runs, or as dead once a short run ended) and rayrl's metrics with
    role tags, wait for SUCCEEDED; then stop only the processes this test started."""
    python = deps_python  # the cluster's and the job's Python: no rayrl in it
    home = tmp_path / "home"
    home.mkdir()
    env = _env(HOME=str(home), RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", RAY_AUTH_MODE="token")
    ray_cli = [str(python), "-m", "ray.scripts.scripts"]
    subprocess.run([*ray_cli, "get-auth-token", "--generate"], env=env, check=True, capture_output=True, timeout=60)
    ports = {k: free_port("127.0.0.1") for k in ("port", "dashboard-port", "dashboard-agent-listen-port",
                                                 "dashboard-agent-grpc-port", "metrics-export-port",
                                                 "runtime-env-agent-port", "node-manager-port",
                                                 "object-manager-port", "ray-client-server-port")}
    temp = tempfile.mkdtemp(prefix="rr-", dir="/tmp")  # short: Ray's socket paths live under it
    log = open(tmp_path / "head.log", "w")
    head = subprocess.Popen([*ray_cli, "start", "--head", "--block", "--node-ip-address=127.0.0.1", "--num-cpus=3",
                             "--dashboard-host=127.0.0.1", f"--temp-dir={temp}", "--min-worker-port=21000",
                             "--max-worker-port=21999", *(f"--{k}={v}" for k, v in ports.items())],
                            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    dashboard = f"http://127.0.0.1:{ports['dashboard-port']}"
    runs = tmp_path / "runs"
    entry = _recipe(python, model_cache, runs, "job", "learner.total_steps=8", "scheduler.type=ray")
    try:
        job, deadline = None, time.monotonic() + 180
        while job is None and time.monotonic() < deadline:  # the job agent takes a few seconds to come up
            out = subprocess.run([*ray_cli, "job", "submit", "--address", dashboard, "--working-dir", str(ROOT),
                                  "--no-wait", "--", *entry], env=env, cwd=ROOT, capture_output=True, text=True,
                                 timeout=120)
            found = re.search(r"raysubmit_\w+", out.stdout + out.stderr)
            job = found.group(0) if out.returncode == 0 and found else None
            if job is None:
                time.sleep(2)
        assert job, f"job submit failed: {out.stderr[-2000:]}"
        seen_roles, metrics, status = set(), "", ""
        deadline = time.monotonic() + 480
        while time.monotonic() < deadline:
            done = subprocess.run([*ray_cli, "job", "status", "--address", dashboard, job], env=env,
                                  capture_output=True, text=True, timeout=60)
            status = (done.stdout + done.stderr).lower()  # the CLI logs "Job '...' succeeded" to stderr
            if any(word in status for word in ("succeeded", "failed", "stopped")):
                break
            if not ROLES <= seen_roles:  # each CLI call is a Python start: no more of them than needed
                seen_roles |= _actor_names(ray_cli, dashboard, env)
            if not SAMPLES.search(metrics):
                metrics = _scrape(ports["metrics-export-port"])
            time.sleep(1 if not ROLES <= seen_roles else 3)
        if not ROLES <= seen_roles:  # a short job can end between two listings: its actors are then listed as dead
            seen_roles |= _actor_names(ray_cli, dashboard, env)
        deadline = time.monotonic() + 60  # the metrics agent exports with a lag; give it time after the job
        while not SAMPLES.search(metrics) and time.monotonic() < deadline:
            metrics = _scrape(ports["metrics-export-port"])
            time.sleep(2)
        logs = subprocess.run([*ray_cli, "job", "logs", "--address", dashboard, job], env=env, capture_output=True,
                              text=True, timeout=60).stdout
        assert "succeeded" in status, f"{status}\n{logs[-3000:]}"
        assert ROLES <= seen_roles, seen_roles
        assert SAMPLES.search(metrics), metrics[-2000:]
        assert json.loads((runs / "job" / "summary.json").read_text())["steps"] == 8

        # the calculator-agent recipe as a job too: its agent function imports from the working directory. Dynamic
        # sampling off: the model warmed up for the tool-call format alone earns a reward rarely, and in a CI run the
        # recipe's dynamic sampling dropped 925 groups of 2 with equal rewards to find 8 (145 s of a 190 s job)
        agent = [str(python), "recipes/calculator_agent.py", "--config", "recipes/calculator_agent.yaml", *AGENT_BUILD,
                 "learner.total_steps=2", "rollout.batch_size=4", "rollout.group_size=2",
                 "algorithm.dynamic_sampling=false", f"demo.cache_dir={model_cache}",
                 f"metrics.run_dir={runs}", "metrics.run_name=agent-job", "metrics.progress=false",
                 "checkpoint.save_final=false", "scheduler.include_dashboard=false", "scheduler.type=ray"]
        out = subprocess.run([*ray_cli, "job", "submit", "--address", dashboard, "--working-dir", str(ROOT), "--",
                              *agent], env=env, cwd=ROOT, capture_output=True, text=True, timeout=900)
        assert out.returncode == 0 and "succeeded" in (out.stdout + out.stderr).lower(), (out.stdout + out.stderr)[-3000:]
        agent_summary = json.loads((runs / "agent-job" / "summary.json").read_text())
        assert agent_summary["steps"] == 2 and agent_summary["gateway"]["turns"] > 0
    finally:
        os.killpg(head.pid, signal.SIGTERM)
        try:
            head.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
            head.wait()
        log.close()
    deadline, left = time.monotonic() + 30, ["?"]
    while left and time.monotonic() < deadline:  # the head's children go with it, within seconds
        left = subprocess.run(["pgrep", "-f", temp], capture_output=True, text=True).stdout.split()
        if left:
            time.sleep(0.5)
    for pid in left:  # a straggler outside the process group, still ours: it names our temp dir
        os.kill(int(pid), signal.SIGKILL)
    assert not left, f"processes of the test's cluster outlived its head: {left}"
