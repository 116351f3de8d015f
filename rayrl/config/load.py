"""load_config: a YAML file and dotted overrides, read, merged and validated into a Config."""

from __future__ import annotations

import os

from pydantic import ValidationError

from rayrl.config.files import ConfigError, explain, merge, parse_overrides, read_config_file
from rayrl.config.moved import check_moved
from rayrl.config.run import SECTIONS, Config


def load_config(path: str | os.PathLike | None = None, overrides: list[str] | None = None) -> Config:
    """Read a YAML file (optional), apply dotted overrides, validate; raise ConfigError naming the key."""
    tree = merge(read_config_file(path) if path is not None else {}, parse_overrides(overrides or []))
    check_moved(tree)
    try:
        return Config.model_validate(tree)
    except ValidationError as err:
        raise ConfigError(explain(err, Config, SECTIONS)) from None
