"""Reading an experiment config file and applying `--config KEY=VALUE` overrides.

The CLI only checks what it must to send the config: that the file reads, parses as YAML and holds a
mapping. The API validates the rest (`POST /experiments` with `validate_only`).

NNI experiment configs (v1 and v2) are sent as they are (the API translates them), except that
their search-space file (`searchSpacePath` / `searchSpaceFile`, relative to the config file) is read
here and sent inline as `searchSpace`: the API cannot read the user's files; and that one without an
`experimentName` gets the name of the config file's folder (`name_nni_experiment`), as NNI's examples
are named by their folders, rather than the API's default ``Experiment N``.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from det.errors import ConfigFileError, UsageError
from stratus.contract.nni import canonical_nni_keys, is_nni_config, nni_config_version


def load_config(path: Path, overrides: Iterable[str] = ()) -> dict[str, Any]:
    """The config in `path` (an NNI config with its search space inlined) with `overrides` applied."""
    config = read_config_file(path)
    if is_nni_config(config):
        if nni_config_version(config) == 2:
            config = canonical_nni_keys(config)  # `search_space_file` is `searchSpaceFile`, as in NNI
        inline_nni_search_space(config, path)
        name_nni_experiment(config, path)
    for override in overrides:
        keys, value = parse_override(override)
        set_nested(config, keys, value)
    return config


def read_config_file(path: Path) -> dict[str, Any]:
    text = _read_text(
        path,
        "config file",
        missing=f"config file {path} does not exist; pass the path of an experiment config (.yaml)",
        folder=f"config file {path} is a folder; pass the path of an experiment config (.yaml)",
    )
    try:
        config = yaml.safe_load(text)
    except yaml.MarkedYAMLError as e:
        raise ConfigFileError(f"{_where(path, e)}: {_problem(e)}; fix the YAML syntax") from e
    except yaml.YAMLError as e:
        raise ConfigFileError(f"{path} is not valid YAML ({e}); fix the YAML syntax") from e
    if config is None:
        raise ConfigFileError(f"config file {path} is empty; write the experiment config in it")
    check_plain_values(config, f"config file {path}")
    if not isinstance(config, dict):
        raise ConfigFileError(
            f"config file {path} holds a {_yaml_kind(config)} at the top level; "
            "an experiment config is a mapping of keys (name:, searcher:, hyperparameters:, ...)"
        )
    return config


_SEARCH_SPACE_FILE_KEYS = ("searchSpaceFile", "searchSpacePath")  # NNI v2, v1


def inline_nni_search_space(config: dict[str, Any], config_path: Path) -> None:
    """Replace `searchSpaceFile` / `searchSpacePath` by the file's content under `searchSpace`.

    Relative paths are relative to the config file's folder, as in NNI. A config that already has
    `searchSpace` is left alone (giving both is the API's to report).
    """
    if config.get("searchSpace") is not None:
        return
    for key in _SEARCH_SPACE_FILE_KEYS:
        value = config.get(key)
        if value is None:
            continue
        if not isinstance(value, str) or not value.strip():
            raise ConfigFileError(f"{key} in {config_path} must be the path of the search-space file (.json)")
        space_path = _relative_to_config(config_path, value)
        config["searchSpace"] = read_search_space(space_path, key, config_path)
        del config[key]
        return


def name_nni_experiment(config: dict[str, Any], config_path: Path) -> None:
    """Name an NNI config that has no `experimentName` (in any of the spellings NNI accepts:
    `experiment_name`, ...) after the config file's folder: `mnist-pytorch` for
    ``examples/trials/mnist-pytorch/config.yml``."""
    if any(isinstance(key, str) and _nni_key(key) == "experimentname" for key in config):
        return
    folder = config_path.resolve().parent.name
    if folder:
        config["experimentName"] = folder


def _nni_key(key: str) -> str:
    """A key as NNI compares them: case and underscores ignored."""
    return key.replace("_", "").lower()


def read_search_space(path: Path, key: str, config_path: Path) -> dict[str, Any]:
    """An NNI search-space file: JSON (or YAML), holding a mapping of names to {_type, _value}."""
    text = _read_text(
        path,
        "search space file",
        missing=f"search space file {path} ({key} in {config_path}) does not exist; "
        "fix the path (it is relative to the config file)",
    )
    try:
        space = json.loads(text)
    except json.JSONDecodeError as e:
        if path.suffix.lower() == ".json":
            raise ConfigFileError(
                f"search space file {path}, line {e.lineno}, column {e.colno}: {e.msg}; fix the JSON"
            ) from e
        try:
            space = yaml.safe_load(text)
        except yaml.YAMLError as ye:
            raise ConfigFileError(
                f"search space file {path} is neither JSON nor YAML ({_problem(ye)}); fix its syntax"
            ) from ye
    check_plain_values(space, f"search space file {path}")
    if not isinstance(space, dict):
        raise ConfigFileError(
            f"search space file {path} holds a {_yaml_kind(space)}; a search space is a mapping of "
            'names to {"_type": ..., "_value": [...]}'
        )
    return space


def nni_code_directory(config: Mapping[str, Any], config_path: Path) -> Path:
    """The trial code folder of an NNI config (`trialCodeDirectory`, v1 `trial.codeDir`; NNI's
    default "."), relative to the config file's folder."""
    trial = config.get("trial")
    value = trial.get("codeDir") if isinstance(trial, Mapping) else config.get("trialCodeDirectory")
    if not isinstance(value, str) or not value.strip():
        value = "."
    return _relative_to_config(config_path, value)


def _relative_to_config(config_path: Path, value: str) -> Path:
    path = Path(value).expanduser()
    return path if path.is_absolute() else config_path.parent / path


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
    check_plain_values(value, f"--config {key}")
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


def _read_text(path: Path, what: str, *, missing: str, folder: str | None = None) -> str:
    """The text of file `path` (a `what`); ConfigFileError `missing` when it does not exist, `folder`
    (when given) when it is a folder, and one naming the OS's reason otherwise."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError as e:
        raise ConfigFileError(missing) from e
    except (OSError, UnicodeDecodeError) as e:
        if folder is not None and isinstance(e, IsADirectoryError):
            raise ConfigFileError(folder) from e
        raise ConfigFileError(f"cannot read {what} {path}: {e}; check the file") from e


#: Values a config may expand to: far beyond any real config, far below what YAML aliases that repeat
#: anchors (a "billion laughs") expand to when the config is sent as JSON.
MAX_YAML_VALUES = 100_000


def check_plain_values(document: Any, source: str) -> None:
    """What the CLI sends is JSON: refuse, with the path of the value, what YAML reads as something else
    (a date, `!!binary`, a set) and a document whose aliases expand beyond `MAX_YAML_VALUES` values."""
    stack: list[tuple[Any, str]] = [(document, "")]
    seen = 0
    while stack:
        value, where = stack.pop()
        seen += 1
        if seen > MAX_YAML_VALUES:
            raise ConfigFileError(
                f"{source} expands to more than {MAX_YAML_VALUES:,} values through YAML aliases "
                "(anchors repeated inside anchors); write the values out instead"
            )
        at = f"{source}: {where or '(top level)'}"
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str | int | float | bool) or isinstance(key, datetime.date):
                    raise ConfigFileError(
                        f"{at}: the key {key!r} is read as a YAML {_yaml_kind(key)}; quote it to make it a string"
                    )
                stack.append((item, f"{where}.{key}" if where else str(key)))
        elif isinstance(value, list):
            stack.extend((item, f"{where}[{index}]") for index, item in enumerate(value))
        elif isinstance(value, datetime.date):
            raise ConfigFileError(
                f"{at}: {value} is read as a YAML date; quote it ('{value}') to pass it as text"
            )
        elif isinstance(value, bytes):
            raise ConfigFileError(f"{at}: !!binary values cannot be sent; write the value as text")
        elif not (isinstance(value, str | int | float | bool) or value is None):
            raise ConfigFileError(
                f"{at}: a YAML {_yaml_kind(value)} cannot be sent; use a mapping, a list or a plain value"
            )


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
