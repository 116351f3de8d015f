"""`pip install .` (not editable) gives rayrl.actors and rayrl.placement from the installed copy."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

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
    source = {p.relative_to(ROOT).as_posix() for p in _modules(ROOT / "rayrl")}
    installed = {p.relative_to(target).as_posix() for p in _modules(target / "rayrl")}
    assert source - installed == set(), "modules left out of the install: a folder without __init__.py?"


def _modules(root: Path) -> list[Path]:
    """Every .py file under root, through the actors/ and placement/ links."""
    return [Path(d) / f for d, _, files in os.walk(root, followlinks=True) for f in files
            if f.endswith(".py") and "__pycache__" not in d]


def test_each_actor_module_imports_only_what_it_needs():
    # rayrl.actors resolves its classes on first use: a Ray worker starting the buffer, the broadcaster or a reward
    # actor imports that module alone, without transformers and the learner's engines (seconds per process)
    heavy = ("transformers", "rayrl.engines.learner", "rayrl.actors.learner")
    code = ("import sys, rayrl.actors.buffer, rayrl.actors.broadcast, rayrl.actors.reward;"
            f"print(sorted(m for m in {heavy!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, cwd=ROOT,
                         timeout=300).stdout
    assert out.strip() == "[]", out
    import rayrl.actors

    for name in rayrl.actors.__all__:  # every exported name resolves to the class of that name (a Ray actor or a group)
        cls = getattr(rayrl.actors, name)
        assert (cls.__ray_metadata__.class_name if hasattr(cls, "__ray_metadata__") else cls.__name__) == name
    with pytest.raises(AttributeError, match="has no attribute 'Trainer'"):
        rayrl.actors.Trainer
