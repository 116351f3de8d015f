"""Configuration text: YAML files (read and written) and dotted key=value overrides as nested dicts, and
validation errors turned into lines that name the key."""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel


class ConfigError(ValueError):
    """A bad key or value in the run configuration; the message names it."""


class _YamlLoader(yaml.SafeLoader):
    """YAML 1.1 reads 1e-4 (no dot) as a string; configs mean a float, as YAML 1.2 and JSON do."""


_YamlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*\.[0-9_]*(?:[eE][-+]?[0-9]+)?|\.[0-9_]+(?:[eE][-+]?[0-9]+)?"
               r"|[0-9][0-9_]*[eE][-+]?[0-9]+|\.inf|\.Inf|\.INF|\.nan|\.NaN|\.NAN)$"),
    list("-+0123456789."))


def read_config_file(path) -> dict:
    """A YAML file of config sections as a nested dict; ConfigError names what is wrong with the file."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file '{path}' " + ("is not a file" if p.exists() else "does not exist"))
    try:
        text = p.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError) as err:
        raise ConfigError(f"config file '{path}' cannot be read as UTF-8 text ({err})") from None
    tree = read_yaml(text, f"config file '{path}'") or {}
    if not isinstance(tree, dict):
        raise ConfigError(f"config file '{path}' must hold a mapping of sections, got {type(tree).__name__}")
    return tree


def write_config_file(tree: dict, path) -> None:
    """A config's sections (as plain data) as a YAML file that read_config_file reads back."""
    Path(path).write_text(yaml.safe_dump(tree, sort_keys=False))


def read_yaml(text: str, where: str) -> Any:
    try:
        return yaml.load(text, Loader=_YamlLoader)
    except yaml.YAMLError as err:
        raise ConfigError(f"{where} is not valid YAML: {' '.join(str(err).split())}") from None


def _set_dotted(tree: dict, key: str, value: Any) -> None:
    parts = key.split(".")
    node = tree
    for p in parts[:-1]:
        child = node.setdefault(p, {})
        if not isinstance(child, dict):
            raise ConfigError(f"cannot set '{key}': '{p}' is a value, not a section")
        node = child
    node[parts[-1]] = value


def parse_overrides(overrides: list[str]) -> dict:
    """Turn ["rollout.batch_size=32", ...] into a nested dict; values are parsed as YAML."""
    tree: dict = {}
    for item in overrides:
        if "=" not in item or item.startswith("="):
            raise ConfigError(f"override '{item}' is not of the form key.path=value")
        key, raw = item.split("=", 1)
        _set_dotted(tree, key.strip(), read_yaml(raw, f"the value of override '{item}'") if raw else "")
    return tree


def merge(base: dict, extra: dict) -> dict:
    out = dict(base)
    for k, v in extra.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def known_keys(model: type[BaseModel], prefix: str = "") -> list[str]:
    keys = []
    for name, field in model.model_fields.items():
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            keys.extend(known_keys(ann, f"{prefix}{name}."))
        else:
            keys.append(f"{prefix}{name}")
    return keys


def explain(err, config_cls, sections: dict) -> str:
    """pydantic's errors as lines naming each key (a close known key for a typo, the rule for a rule)."""
    known = known_keys(config_cls)
    lines = []
    for e in err.errors():
        key = ".".join(str(p) for p in e["loc"])
        if e["type"] == "extra_forbidden":
            near = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
            hint = f"; did you mean '{near[0]}'?" if near else ""
            lines.append(f"unknown config key '{key}'{hint}")
        elif e["type"] == "value_error" and isinstance(e.get("input"), dict):  # a rule across several keys
            lines.append(e["msg"].removeprefix("Value error, "))
        elif key in sections and e["type"] == "model_type":
            lines.append(f"'{key}' is a section of keys (e.g. {key}.{next(iter(sections[key].model_fields))}=...), "
                         f"not a value (got {e.get('input')!r})")
        else:
            lines.append(f"bad value for '{key}': {e['msg']} (got {e.get('input')!r})")
    return invalid(lines)


def invalid(lines: list[str]) -> str:
    """One problem on one line; several, a line each under a heading."""
    return f"invalid config: {lines[0]}" if len(lines) == 1 else "invalid config:\n  " + "\n  ".join(lines)
