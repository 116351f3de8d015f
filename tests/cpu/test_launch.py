"""Launch modes: rayrl installed non-editable (a wheel in a fresh venv) and the recipe started from the
repository root, where the source tree's rayrl/ comes first on the Ray workers' sys.path."""

from __future__ import annotations

import json
import os
import site
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_wheel_install_runs_the_recipe_from_the_repository_root(tmp_path, model_cache):
    wheels, venv = tmp_path / "wheels", tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(wheels),
                    str(ROOT)], check=True, timeout=300)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], check=True,
                             capture_output=True, text=True).stdout.strip()
    # the fresh venv reuses this environment's dependencies (torch, ray, ...), but not its editable rayrl
    Path(purelib, "dependencies.pth").write_text(site.getsitepackages()[0] + "\n")
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", *wheels.glob("rayrl-*.whl")], check=True,
                   timeout=300)
    installed = subprocess.run([python, "-c", "import rayrl.actors; print(rayrl.actors.__file__)"], cwd=tmp_path,
                               check=True, capture_output=True, text=True).stdout
    assert installed.startswith(purelib), installed
    runs = tmp_path / "runs"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    proc = subprocess.run(
        [python, "recipes/arithmetic_grpo.py", "--config", "recipes/arithmetic_grpo.yaml", "learner.total_steps=3",
         "rollout.batch_size=8", "rollout.group_size=4", "data.eval_size=16", f"model.cache_dir={model_cache}",
         f"metrics.run_dir={runs}", "metrics.run_name=wheel", "metrics.progress=false",
         "checkpoint.save_final=false", "scheduler.include_dashboard=false"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads((runs / "wheel" / "summary.json").read_text())["steps"] == 3
