"""Import strings ('package.module:name') from the config -> the object, with errors that name the key."""

from __future__ import annotations

import importlib
import sys


def load_object(spec: str, what: str, search_path: list[str] | None = None, kind: str = "attribute"):
    """what: the config key, kind: what the name should be (both for the message). search_path: directories to import from besides sys.path
    (the driver's working directory, for actors on its node)."""
    for d in search_path or []:
        if d not in sys.path:
            sys.path.append(d)
    if not isinstance(spec, str) or ":" not in spec:
        raise ValueError(f"{what} '{spec}' must look like 'package.module:{kind if kind != 'attribute' else 'name'}'")
    mod_name, attr = spec.split(":", 1)
    try:
        module = importlib.import_module(mod_name)
    except ImportError as err:
        raise ValueError(f"{what} '{spec}': cannot import module '{mod_name}' ({err})") from None
    if not hasattr(module, attr):
        raise ValueError(f"{what} '{spec}': module '{mod_name}' has no {kind} '{attr}'")
    return getattr(module, attr)
