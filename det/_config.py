"""Reading an experiment config file and applying `--config KEY=VALUE` overrides.

The CLI only checks what it must to send the config: that the file reads, parses as YAML and holds a
mapping. The API validates the rest (`POST /experiments` with `validate_only`).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from det.errors import ConfigFileError, UsageError


def load_config(path: Path, overrides: Iterable[str] = ()) -> dict[str, Any]:
    """The config in `path` with `overrides` applied."""
    config = read_config_file(path)
    for override in overrides:
        keys, value = parse_override(override)
        set_nested(config, keys, value)
    return config


def read_config_file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as e:
        raise ConfigFileError(
            f"config file {path} does not exist; pass the path of an experiment config (.yaml)"
        ) from e
    except IsADirectoryError as e:
        raise ConfigFileError(
            f"config file {path} is a folder; pass the path of an experiment config (.yaml)"
        ) from e
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigFileError(f"cannot read config file {path}: {e}; check the file") from e
    try:
        config = yaml.safe_load(text)
    except yaml.MarkedYAMLError as e:
        raise ConfigFileError(f"{_where(path, e)}: {_problem(e)}; fix the YAML syntax") from e
    except yaml.YAMLError as e:
        raise ConfigFileError(f"{path} is not valid YAML ({e}); fix the YAML syntax") from e
    if config is None:
        raise ConfigFileError(f"config file {path} is empty; write the experiment config in it")
    if not isinstance(config, dict):
        raise ConfigFileError(
            f"config file {path} holds a {_yaml_kind(config)} at the top level; "
            "an experiment config is a mapping of keys (name:, searcher:, hyperparameters:, ...)"
        )
    return config


def parse_override(text: str) -> tuple[list[str], Any]:
    """`searcher.max_trials=4` -> (["searcher", "max_trials"], 4); the value is read as YAML."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise UsageError(
            f"--config {text!r} is not of the form KEY=VALUE; write e.g. --config resources.slots_per_trial=2"
        )
    keys = key.split(".")
    if any(not k.strip() for k in keys):
        raise UsageError(
            f"--config key {key!r} has an empty part; write dotted keys like searcher.max_length.batches"
        )
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError as e:
        raise UsageError(
            f"--config value {raw!r} of {key} is not a YAML value ({_problem(e)}); quote it"
        ) from e
    return [k.strip() for k in keys], value


def set_nested(config: dict[str, Any], keys: list[str], value: Any) -> None:
    """Set `config[k1][k2]...[kn] = value`, creating maps on the way.

    A scalar on the way is replaced by a map: `searcher.max_length.batches=100` turns
    `max_length: 100` into `max_length: {batches: 100}`, which is what the user asked for.
    """
    node = config
    for key in keys[:-1]:
        child = node.get(key)
        if not isinstance(child, dict):
            child = {}
            node[key] = child
        node = child
    node[keys[-1]] = value


def _where(path: Path, error: yaml.MarkedYAMLError) -> str:
    mark = error.problem_mark or error.context_mark
    if mark is None:
        return f"{path}"
    return f"{path}, line {mark.line + 1}, column {mark.column + 1}"


def _problem(error: yaml.YAMLError) -> str:
    if isinstance(error, yaml.MarkedYAMLError):
        return str(error.problem or error.context or "invalid YAML")
    return str(error)


def _yaml_kind(value: object) -> str:
    if isinstance(value, list):
        return "list"
    if isinstance(value, str):
        return "string"
    return type(value).__name__
