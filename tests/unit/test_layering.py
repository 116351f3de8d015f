"""The layering contract (.importlinter at the repository root), checked by import-linter over every import
statement, direct or through other rayrl modules: engines, algorithms, workflows, data and models never import
Ray or the actors; data never imports workflows."""

from pathlib import Path

from importlinter.cli import EXIT_STATUS_SUCCESS, lint_imports

ROOT = Path(__file__).resolve().parents[2]


def test_layers_import_only_downwards():
    assert lint_imports(config_filename=str(ROOT / ".importlinter"), no_cache=True, no_logo=True) \
        == EXIT_STATUS_SUCCESS, "a layering contract is broken: the report above names the import chain"


def test_the_contract_catches_an_engine_that_imports_ray(tmp_path, monkeypatch):
    """The same contract over a copy of the package with one offending line: it must fail (and the copy
    without it passes, so the failure is that line's)."""
    import shutil
    import sys

    pkg = tmp_path / "rayrl"
    shutil.copytree(ROOT / "rayrl", pkg, ignore=shutil.ignore_patterns("__pycache__"))  # actors/, placement/ too
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    for name in [m for m in sys.modules if m == "rayrl" or m.startswith("rayrl.")]:
        monkeypatch.delitem(sys.modules, name)
    lint = lambda: lint_imports(config_filename=str(ROOT / ".importlinter"), no_cache=True, no_logo=True)  # noqa: E731
    assert lint() == EXIT_STATUS_SUCCESS
    (pkg / "engines" / "offender.py").write_text("import ray\n")
    assert lint() != EXIT_STATUS_SUCCESS


def test_tests_import_nothing_from_the_benchmarks():
    """What tests and benchmarks share lives in rayrl.testing: a benchmark may change its code without a test
    changing its meaning."""
    import ast

    offenders = []
    for path in (ROOT / "tests").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            offenders += [f"{path.relative_to(ROOT)}: {n}" for n in names if n.split(".")[0] == "benchmarks"]
    assert offenders == [], offenders
