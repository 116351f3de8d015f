"""What every benchmark and GPU check records beside its numbers (machine, commit, date, arguments), in the
repository's benchmarks/results; the commit passed in, where a copied checkout's git lags behind."""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"  # a checkout or an editable install


def cpu_model() -> str:
    """The host CPU's model name: a host-bound decode loop's speed depends on it (Linux; else platform's guess)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine() -> dict:
    info = {"host": platform.node(), "cpus": os.cpu_count(), "cpu_model": cpu_model(),
            "platform": platform.platform(), "python": platform.python_version()}
    try:
        import torch

        info["torch"] = torch.__version__
        if torch.cuda.is_available():
            info["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    except ImportError:
        pass
    return info


def commit() -> str:
    try:
        return subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True,
                              cwd=RESULTS.parents[1], check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def benchmark_parser(doc: str | None) -> argparse.ArgumentParser:
    """An argument parser that takes --commit: the commit of the code that runs, when the caller knows it
    better than this checkout's git (a copy of the tree whose .git lags behind)."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--commit", default=None, help="commit of the code that runs (default: git describe --dirty here)")
    return p


def outside_ray_env() -> dict[str, str]:
    """This process's environment without Ray's variables: raw vLLM baselines must not join our cluster."""
    return {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}


def run_outside_ray(script: str, args: list[str], marker: str, timeout_s: float) -> str:
    """Run a Python script in a child process without Ray's environment (raw vLLM baselines) and return
    the text after `marker` on its output; a failure raises with the end of its stderr."""
    proc = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True,
                          timeout=timeout_s, env=outside_ray_env())
    line = next((x for x in proc.stdout.splitlines() if x.startswith(marker)), None)
    if line is None:
        raise RuntimeError(f"child process failed (rc {proc.returncode}):\n{proc.stderr[-4000:]}")
    return line[len(marker):]


def write_result(name: str, payload: dict, commit_id: str | None = None, argv: list[str] | None = None,
                 path: Path | None = None) -> Path:
    """benchmarks/results/<name>-<UTC time>.json: what ran (arguments, commit, whether the tree was dirty),
    where, when, and the payload. commit_id: the caller's --commit, recorded as given
    (else the COMMIT that run_gpu_checks.sh exports for the GPU tests, else git). path: rewrite that
    file instead (a long benchmark saving what it has after each part)."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    now = datetime.now(timezone.utc)
    path = path or RESULTS / f"{name}-{now.strftime('%Y%m%d-%H%M%S')}.json"
    source = "caller" if commit_id else "COMMIT" if os.environ.get("COMMIT") else "git"  # COMMIT: the GPU tests
    record = {"benchmark": name, "date": now.isoformat(), "commit": commit_id or os.environ.get("COMMIT") or commit(),
              "commit_from": source, "argv": sys.argv[1:] if argv is None else argv,
              "machine": machine(), **payload}
    path.write_text(json.dumps(record, indent=2))
    return path


def format_table(rows: list[dict], columns: list[str]) -> str:
    """rows as aligned text columns (floats to 3 decimals); the header alone when there are no rows."""
    widths = {c: max([len(c), *(len(_fmt(r.get(c))) for r in rows)]) for c in columns}
    lines = ["  ".join(c.ljust(widths[c]) for c in columns)]
    lines += ["  ".join(_fmt(r.get(c)).ljust(widths[c]) for c in columns) for r in rows]
    return "\n".join(lines)


def _fmt(v) -> str:
    return f"{v:.3f}" if isinstance(v, float) else str(v)
