"""Reading a config: YAML text -> mapping -> `ExperimentConfig`, with every problem reported.

The YAML reader is `_yaml.py`; turning pydantic's errors into `ConfigProblem`s is `_problems.py`.
Here: the secrets stripped before validation and the warnings about fields Stratus ignores.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from chalicelib.config._base import StrictModel
from chalicelib.config._problems import ROOT_PATH, describe, problems_from_validation_error
from chalicelib.config._yaml import load_yaml_config
from chalicelib.config.errors import ConfigInvalidError, ConfigProblem
from chalicelib.config.schema import ExperimentConfig

__all__ = ["ParsedConfig", "load_yaml_config", "parse_experiment_config", "parse_yaml_config"]


@dataclass(frozen=True)
class ParsedConfig:
    """A validated config and the warnings about fields Stratus accepted but ignores."""

    config: ExperimentConfig
    warnings: list[str] = field(default_factory=list)


# Keys that may carry credentials: accepted, never stored, and the user is told so.
_SECRETS: dict[tuple[str, str], str] = {
    ("checkpoint_storage", "access_key"): "trials reach S3 with the platform's IAM role",
    ("checkpoint_storage", "secret_key"): "trials reach S3 with the platform's IAM role",
    ("environment", "registry_auth"): "images are pulled with the backend's credentials",
}


def parse_experiment_config(raw: Mapping[str, Any]) -> ParsedConfig:
    """Validate a config mapping (from YAML or JSON); raise ConfigInvalidError listing every problem."""
    if not isinstance(raw, Mapping):
        problem = ConfigProblem(ROOT_PATH, f"must be a mapping of config fields, got {describe(raw)}")
        raise ConfigInvalidError([problem])
    data, warnings = _strip_secrets(dict(raw))
    warnings += _renamed_modules(data)
    try:
        config = ExperimentConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigInvalidError(problems_from_validation_error(exc)) from None
    except RecursionError:
        raise ConfigInvalidError([ConfigProblem(ROOT_PATH, "is nested too deeply")]) from None
    return ParsedConfig(config=config, warnings=[*warnings, *_ignored_field_warnings(config, "")])


def parse_yaml_config(text: str) -> ParsedConfig:
    """`load_yaml_config` then `parse_experiment_config`."""
    return parse_experiment_config(load_yaml_config(text))


#: `python3 -m launchers.torch_distributed` and the like, as configs wrote them before these packages were
#: installed under the `stratus` namespace (setup.py).
_OLD_MODULE = re.compile(r"(?<=-m )(launchers|harness)\.(?=[a-z_])")


def _renamed_modules(data: dict[str, Any]) -> list[str]:
    """Rewrite an entrypoint's `-m launchers.X` / `-m harness.X` to the installed `stratus.` names, with a
    warning saying so (a context's own `launchers/` would otherwise be what runs)."""
    entrypoint = data.get("entrypoint")
    if isinstance(entrypoint, str):
        new: Any = _OLD_MODULE.sub(r"stratus.\1.", entrypoint)
    elif isinstance(entrypoint, list) and all(isinstance(word, str) for word in entrypoint):
        new = [
            f"stratus.{word}" if before == "-m" and _OLD_MODULE.match(f"-m {word}", 3) else word
            for before, word in zip(["", *entrypoint], entrypoint, strict=False)
        ]
    else:
        return []
    if new == entrypoint:
        return []
    data["entrypoint"] = new
    return [
        "entrypoint: Stratus's launchers and harness are installed as stratus.launchers and stratus.harness "
        "(Determined's determined.launch.* works too); the entrypoint now runs "
        f"{new if isinstance(new, str) else ' '.join(new)!r}"
    ]


def _strip_secrets(data: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    warnings: list[str] = []
    for (section, key), reason in _SECRETS.items():
        value = data.get(section)
        if isinstance(value, dict) and key in value:
            data[section] = {k: v for k, v in value.items() if k != key}
            warnings.append(f"{section}.{key}: ignored and not stored ({reason})")
    return data, warnings


def _ignored_field_warnings(model: StrictModel, prefix: str) -> Iterator[str]:
    cls = type(model)
    for name, info in cls.model_fields.items():
        value = getattr(model, name)
        path = f"{prefix}.{name}" if prefix else name
        if name in cls.ignored_fields:
            if value != info.get_default(call_default_factory=True):
                yield f"{path}: ignored by Stratus ({cls.ignored_fields[name]})"
        elif isinstance(value, StrictModel):
            yield from _ignored_field_warnings(value, path)
