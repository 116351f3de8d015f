"""`pip install .` (not editable) gives rayrl.actors and rayrl.placement from the installed copy."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_non_editable_install_exposes_actor_classes(tmp_path):
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--target", str(target), str(ROOT)], check=True, timeout=300)
    code = ("import rayrl.actors, rayrl.placement, rayrl.driver, rayrl.trainer;"
            "from rayrl.actors import RolloutWorker, RewardActor, TrajectoryBuffer, LearnerGroup, WeightBroadcaster;"
            "print(rayrl.actors.__file__)")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, cwd=tmp_path,
                         env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"}, timeout=300).stdout
    assert out.strip().startswith(str(target))
