"""The config layer under random input (hypothesis): random dotted keys, known and not, with values of
random types, as command-line overrides and as a YAML file. Every outcome is a valid Config whose values
have their fields' types, or a ConfigError that names the key; never another exception."""

from __future__ import annotations

import typing

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from rayrl.config import Config, ConfigError, known_keys, load_config

KNOWN = known_keys(Config)
SECTIONS = sorted({k.split(".")[0] for k in KNOWN})

keys = st.one_of(st.sampled_from(KNOWN), st.sampled_from(SECTIONS),
                 st.builds(lambda s, n: f"{s}.{n}", st.sampled_from(SECTIONS), st.from_regex(r"[a-z_]{1,12}", fullmatch=True)),
                 st.from_regex(r"[a-z_]{1,8}(\.[a-z_]{1,8}){0,2}", fullmatch=True))
scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=True, allow_infinity=True),
                    st.text(max_size=12), st.sampled_from(["grpo", "ppo", "vllm", "hf", "1e-4", "0x10", "yes", "~"]))
values = st.one_of(scalars, st.lists(scalars, max_size=3), st.dictionaries(st.text(max_size=5), scalars, max_size=2))


def _field(key: str):
    """The pydantic field annotation of a dotted key."""
    model: type[BaseModel] = Config
    *path, last = key.split(".")
    for p in path:
        model = model.model_fields[p].annotation
    return model.model_fields[last].annotation


def _types_hold(cfg: Config, key: str) -> None:
    """A bool is only ever a bool field's value; an int field holds an int, a float field a float."""
    node = cfg
    for p in key.split("."):
        node = getattr(node, p)
    ann = _field(key)
    allowed = typing.get_args(ann) or (ann,)
    if isinstance(node, bool):
        assert bool in allowed, (key, node)
    elif isinstance(node, int):
        assert int in allowed, (key, node)
    elif isinstance(node, float):
        assert float in allowed, (key, node)


def _check(overrides: list[str], keys_used: list[str], run) -> None:
    try:
        cfg = run()
    except ConfigError as err:
        # the message names a key it was given (or, for a cross-key rule, a key of the section)
        assert any(k in str(err) or k.split(".")[0] in str(err) for k in keys_used) or "YAML" in str(err), (overrides, err)
        return
    for k in keys_used:
        if k in KNOWN:
            _types_hold(cfg, k)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(keys, values), min_size=1, max_size=4))
def test_random_overrides_give_a_config_or_a_config_error(pairs):
    overrides = [f"{k}={yaml.safe_dump(v, default_flow_style=True).strip().removesuffix('...').strip()}" for k, v in pairs]
    _check(overrides, [k for k, _ in pairs], lambda: load_config(None, overrides))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(keys, values, min_size=1, max_size=4))
def test_random_yaml_files_give_a_config_or_a_config_error(tmp_path_factory, tree):
    path = tmp_path_factory.mktemp("cfg") / "config.yaml"
    nested: dict = {}
    for key, value in tree.items():
        node = nested
        *parts, last = key.split(".")
        for p in parts:
            node = node.setdefault(p, {}) if isinstance(node.get(p, {}), dict) else node
        node[last] = value
    path.write_text(yaml.safe_dump(nested))
    _check([str(path)], list(tree), lambda: load_config(path))
