"""The manual: its generated pages are current, it builds with mkdocs in strict mode (no broken link or
anchor), and the README stays a short front door."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_generated_pages_are_current():
    run = subprocess.run([sys.executable, str(ROOT / "docs" / "gen.py"), "--check"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr


def test_the_manual_builds_strictly(tmp_path):
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
                         cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    assert (tmp_path / "configuration" / "index.html").is_file()


def test_the_readme_is_a_front_door():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines; the manual lives in docs/"
