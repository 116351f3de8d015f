"""A local run listens on loopback only: every listening socket of the run's process tree (driver, GCS,
raylet, dashboard and its agents, workers, two FSDP2 ranks and the weight-sync group) while it trains
is on 127.0.0.1."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import psutil

LOOPBACK = ("127.0.0.1", "::1", "::ffff:127.0.0.1")


def _listening(root: psutil.Process) -> list[tuple[str, int, str]]:
    procs = {root.pid: root}
    for p in root.children(recursive=True):
        procs[p.pid] = p
    out = []
    for c in psutil.net_connections(kind="inet"):
        if c.status == psutil.CONN_LISTEN and c.pid in procs:
            try:
                out.append((c.laddr.ip, c.laddr.port, procs[c.pid].name()))
            except psutil.NoSuchProcess:
                pass
    return out


def test_a_local_run_listens_on_loopback_only(model_cache, tmp_path):
    run = tmp_path / "runs" / "exposure"
    args = [f"demo.cache_dir={model_cache}", f"metrics.run_dir={tmp_path / 'runs'}", "metrics.run_name=exposure",
            "learner.total_steps=200", "rollout.batch_size=8", "rollout.group_size=4", "data.eval_size=8",
            "metrics.progress=false", "checkpoint.save_final=false", "learner.backend=fsdp", "learner.num_workers=2"]
    proc = subprocess.Popen([sys.executable, "-m", "rayrl.cli", "train", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 600
        while not (run / "metrics.jsonl").exists() or not (run / "metrics.jsonl").read_text().strip():
            assert proc.poll() is None, proc.stderr.read()[-3000:]
            assert time.monotonic() < deadline, "the run took no step"
            time.sleep(1)
        assert json.loads((run / "metrics.jsonl").read_text().splitlines()[0])["step"] == 1
        sockets = _listening(psutil.Process(proc.pid))
    finally:
        proc.terminate()
        proc.wait(timeout=120)
    names = {name for _, _, name in sockets}
    assert {"gcs_server", "raylet"} <= names, sockets  # the cluster's own listeners were seen
    wide = [s for s in sockets if s[0] not in LOOPBACK]
    assert not wide, f"listening beyond loopback: {wide}"
