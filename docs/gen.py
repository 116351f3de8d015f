"""Writes the generated pages of the manual: configuration.md from rayrl/config/sections.py (every section, key, type,
default and description) and benchmarks.md from the newest JSON of each benchmark (and named config) in
benchmarks/results/.

    python docs/gen.py           # write them
    python docs/gen.py --check   # exit 1 if either differs from what is on disk (CI)
"""

from __future__ import annotations

import argparse
import json
import sys
import typing

from pydantic import BaseModel
from pathlib import Path

DOCS = Path(__file__).resolve().parent
RESULTS = DOCS.parent / "benchmarks" / "results"


def _type(annotation) -> str:
    if typing.get_origin(annotation) is typing.Literal:
        return " \\| ".join(f"`{a}`" for a in typing.get_args(annotation))
    args = typing.get_args(annotation)
    if args and type(None) in args:
        return _type(next(a for a in args if a is not type(None))) + " or unset"
    return f"`{getattr(annotation, '__name__', str(annotation)).replace('typing.', '')}`"


def _default(value) -> str:
    return "unset" if value is None else f"`{json.dumps(value) if not isinstance(value, str) else value}`"


def configuration_md() -> str:
    from rayrl.config import SECTIONS

    out = ["# Configuration", "",
           "Generated from `rayrl/config/sections.py` by `python docs/gen.py`; CI checks it is current.", "",
           "A run's config is a YAML file of these sections plus dotted overrides on the command line",
           "(`python recipes/arithmetic_grpo.py --config recipes/arithmetic_grpo.yaml rollout.batch_size=64`).",
           "An unknown key, a wrong type or a value out of range is an error naming the key; rules across",
           "sections are named functions in `rayrl/config/rules.py`; a key that moved is refused naming its",
           "new place (`rayrl/config/moved.py`); what needs a component's code (a transport's requirements, the",
           "reward function, the files) `rayrl check-config` checks before Ray starts (`rayrl/preflight.py`).",
           "Each component receives its own section only.", ""]
    for name, section in SECTIONS.items():
        out += [f"## `{name}`", "", (section.__doc__ or "").strip(), "", "| key | type | default | what it does |",
                "|---|---|---|---|"]
        out += _rows(name, section)
        out.append("")
    return "\n".join(out)


def _rows(prefix: str, section) -> list[str]:
    """A row per key; a nested section's keys follow under its own prefix."""
    rows = []
    for key, field in section.model_fields.items():
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            rows += _rows(f"{prefix}.{key}", field.annotation)
            continue
        desc = (field.description or "").replace("|", "\\|")
        rows.append(f"| `{prefix}.{key}` | {_type(field.annotation)} | {_default(field.default)} | {desc} |")
    return rows


def _cell(v) -> str:
    if isinstance(v, dict) and {"median", "min", "max"} <= set(v):
        return f"{_cell(v['median'])} [{_cell(v['min'])}, {_cell(v['max'])}]"
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, dict) and 0 < len(v) <= 4 and all(isinstance(x, (int, float)) for x in v.values()):
        return ", ".join(f"{k} {_cell(x)}" for k, x in v.items())  # a few named figures: "mean 0.03, max 0.1"
    if isinstance(v, list) and all(isinstance(x, (int, float)) for x in v):
        return ", ".join(_cell(x) for x in v) if len(v) <= 8 else f"{len(v)} values"
    return str(v).replace("|", "\\|") if not isinstance(v, (dict, list)) else "…"


def _table(rows: list[dict]) -> list[str]:
    cols = list(dict.fromkeys(k for r in rows for k in r if not isinstance(r[k], list) or
                              all(isinstance(x, (int, float)) for x in r[k])))
    return ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols),
            *("| " + " | ".join(_cell(r.get(c, "")) for c in cols) + " |" for r in rows)]


def _machine(d: dict) -> str:
    m = d.get("measured_on") or d.get("machine", {})
    where = ", ".join(m.get("gpus", [])) or f"{m.get('cpus')} CPUs"
    return f"{where}; torch {m.get('torch', '?')}"


def _where(d: dict) -> str:
    """GPU or CPU: the run's own setting, else the machine it ran on."""
    gpus = d.get("gpus", len((d.get("measured_on") or d.get("machine", {})).get("gpus", [])))
    return "GPU" if gpus else "CPU"


def _newest_results() -> dict[str, Path]:
    """The newest JSON per benchmark, machine kind and named config (a benchmark run with several, e.g. vs_trl's
    arithmetic and long answers); a result naming no config is dropped once a newer one of its benchmark names one."""
    newest: dict[str, Path] = {}
    for path in sorted(RESULTS.glob("*.json"), key=lambda p: p.stem.rsplit("-", 2)[1:]):  # oldest first
        name = path.stem.rsplit("-", 2)[0]
        if name.endswith("-partial"):
            continue
        d = json.loads(path.read_text())
        config = d.get("config")
        if isinstance(config, str):
            newest.pop(f"{name} ({_where(d)})", None)
            newest[f"{name} ({_where(d)}, {config})"] = path  # the last written wins
        else:
            newest[f"{name} ({_where(d)})"] = path
    return newest


def benchmarks_md() -> str:
    newest = _newest_results()
    out = ["# Benchmark results", "",
           "Generated by `python docs/gen.py` from the newest JSON of each benchmark and config in",
           "`benchmarks/results/` (every file records its machine, commit, date and arguments). How each is run",
           "and what it means: [Performance](performance.md); older runs and their discussion:",
           "`benchmarks/results/LOG.md`, beside the JSONs.", ""]
    for name, path in sorted(newest.items()):
        d = json.loads(path.read_text())
        out += [f"## {name}", "", f"`{path.name}`: commit {d.get('commit')}, {d.get('date', '')[:10]}, "
                f"{_machine(d)}; arguments `{' '.join(d.get('argv', [])) or '(none)'}`", ""]
        rows = d.get("rows") or d.get("runs")  # a row per measurement, or per repeated run
        if isinstance(rows, list) and rows and isinstance(rows[0], dict):
            out += _table(rows)
        elif isinstance(d.get("summary"), dict):
            out += _table([d["summary"]])
        else:
            scalars = {k: v for k, v in d.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
            out += _table([scalars]) if scalars else ["(no table in this result)"]
        out.append("")
    return "\n".join(out)


PAGES = {"configuration.md": configuration_md, "benchmarks.md": benchmarks_md}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    stale = []
    for name, make in PAGES.items():
        text = make()
        if args.check:
            if not (DOCS / name).is_file() or (DOCS / name).read_text() != text:
                stale.append(name)
        else:
            (DOCS / name).write_text(text)
    if stale:
        print(f"docs out of date: {', '.join(stale)}; run python docs/gen.py", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.path.insert(0, str(DOCS.parent))
    raise SystemExit(main())
