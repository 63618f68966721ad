"""Reading a config: YAML text -> mapping -> `ExperimentConfig`, with every problem reported.

Pydantic's own error text never reaches the user: each validation error is turned into a
`ConfigProblem` whose path is the dotted path the user wrote (union tags dropped, list indices as
`[i]`) and whose message is a short phrase chosen here (or written by the model's validators).
"""

from __future__ import annotations

import difflib
import json
import re
import types
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, ForwardRef, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, JsonValue, RootModel, Tag, ValidationError
from pydantic_core import ErrorDetails

from chalicelib.config._base import StrictModel
from chalicelib.config.errors import ConfigInvalidError, ConfigProblem
from chalicelib.config.hyperparameters import HYPERPARAMETER_TYPES
from chalicelib.config.schema import ExperimentConfig
from chalicelib.config.searcher import SEARCHER_NAMES

__all__ = ["ParsedConfig", "load_yaml_config", "parse_experiment_config", "parse_yaml_config"]

ROOT_PATH = "<config>"
YAML_PATH = "<yaml>"


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


# -- validation errors -> problems ------------------------------------------------------------


def problems_from_validation_error(exc: ValidationError) -> list[ConfigProblem]:
    problems: list[ConfigProblem] = []
    for error in exc.errors(include_url=False):
        problem = _problem(error)
        if problem not in problems:
            problems.append(problem)
    return problems


@dataclass
class _Resolved:
    segments: list[str | int] = field(default_factory=list)  # str: a name, int: a list index
    owner: type[BaseModel] | None = None  # the model whose field the last segment names
    key_error: bool = False  # the error is about a mapping key itself


def _union_members(tp: Any) -> tuple[Any, ...] | None:
    return get_args(tp) if get_origin(tp) in (Union, types.UnionType) else None


def _unwrap(tp: Any) -> Any:
    while get_origin(tp) is Annotated:
        tp = get_args(tp)[0]
    return tp


def _tag(member: Any) -> str | None:
    if get_origin(member) is Annotated:
        for meta in get_args(member)[1:]:
            if isinstance(meta, Tag):
                return meta.tag
    return None


def _resolve(loc: tuple[str | int, ...]) -> _Resolved:
    """Follow an error location through the model types: drop union tags, classify segments."""
    out = _Resolved()
    tp: Any = ExperimentConfig
    i = 0
    while i < len(loc):
        segment = loc[i]
        tp = _unwrap(tp)
        if tp == "JsonValue" or (isinstance(tp, ForwardRef) and tp.__forward_arg__ == "JsonValue"):
            tp = JsonValue  # the recursive references inside pydantic's JsonValue
        if hasattr(tp, "__value__"):  # a type alias (pydantic's JsonValue)
            tp = tp.__value__
            continue
        members = _union_members(tp) if tp is not None else None
        if members is not None:
            options = [m for m in members if m is not type(None)]
            tags = {tag: m for m in options if (tag := _tag(m)) is not None}
            if isinstance(segment, str) and segment in tags:
                tp, i = tags[segment], i + 1
            else:
                tp = options[0] if len(options) == 1 else None
            continue
        if isinstance(tp, type) and issubclass(tp, RootModel):
            tp = tp.model_fields["root"].annotation
            continue
        out.owner = None
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            out.owner = tp
            info = tp.model_fields.get(segment) if isinstance(segment, str) else None
            tp = info.annotation if info is not None else None
        elif get_origin(tp) in (dict, Mapping):
            if i + 1 < len(loc) and loc[i + 1] == "[key]":
                out.key_error = True
                out.segments.append(str(segment))
                break
            tp = get_args(tp)[1]
            segment = str(segment)
        elif get_origin(tp) in (list, Sequence) and isinstance(segment, int):
            tp = get_args(tp)[0]
        else:
            tp = None
        out.segments.append(segment)
        i += 1
    return out


def render_path(segments: Sequence[str | int]) -> str:
    text = ""
    for segment in segments:
        if isinstance(segment, int):
            text += f"[{segment}]"
        else:
            text += f".{segment}" if text else segment
    return text or ROOT_PATH


def describe(value: Any) -> str:
    """A short, user-facing rendering of an input value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:37] + "..."
        return json.dumps(shown, ensure_ascii=False)
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, bytes):
        return "binary data"
    return f"a {type(value).__name__}"


def _number(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _model_classes(tp: Any) -> Iterator[type[BaseModel]]:
    tp = _unwrap(tp)
    members = _union_members(tp)
    if members is not None:
        for member in members:
            yield from _model_classes(member)
    elif isinstance(tp, type) and issubclass(tp, BaseModel) and not issubclass(tp, RootModel):
        yield tp


def _unknown_field_hint(word: str, owner: type[BaseModel] | None) -> str:
    """`; did you mean "x"?` naming a close field at the same level, or the section `word` belongs to."""
    if owner is None:
        return ""
    matches = difflib.get_close_matches(word, list(owner.model_fields), n=1, cutoff=0.6)
    if matches:
        return f'; did you mean "{matches[0]}"?'
    for name, info in owner.model_fields.items():
        if any(word in cls.model_fields for cls in _model_classes(info.annotation)):
            return f'; did you mean "{name}.{word}"?'
    return ""


_TYPE_PHRASES: dict[str, str] = {
    "int_type": "must be an integer",
    "int_parsing": "must be an integer",
    "int_from_float": "must be an integer",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "string_type": "must be a string",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "list_type": "must be a list",
    "dict_type": "must be a mapping",
    "model_type": "must be a mapping",
    "model_attributes_type": "must be a mapping",
    "finite_number": "must be a finite number",
}

# discriminator function -> (the key it reads, the valid values, what the key names)
_DISCRIMINATORS: dict[str, tuple[str, tuple[str, ...], str]] = {
    "_hp_kind()": ("type", HYPERPARAMETER_TYPES, "hyperparameter type"),
    "_searcher_name()": ("name", SEARCHER_NAMES, "searcher"),
}


def _problem(error: ErrorDetails) -> ConfigProblem:
    kind = error["type"]
    ctx: dict[str, Any] = dict(error.get("ctx") or {})
    value = error.get("input")
    resolved = _resolve(tuple(error["loc"]))
    path = render_path(resolved.segments)
    if resolved.key_error:
        return ConfigProblem(path, f"names must be strings, got {describe(value)}")
    if kind == "stratus":
        return ConfigProblem(path, str(ctx.get("message", error["msg"])))
    if kind == "stratus_type":
        return ConfigProblem(path, f"{ctx.get('message', error['msg'])}, got {describe(value)}")
    if kind == "missing":
        return ConfigProblem(path, "required")
    if kind == "extra_forbidden":
        name = str(resolved.segments[-1]) if resolved.segments else ""
        return ConfigProblem(path, f'unknown field "{name}"{_unknown_field_hint(name, resolved.owner)}')
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        return _union_problem(kind, path, ctx, value)
    if kind == "literal_error":
        expected = str(ctx.get("expected", "")).replace("'", '"')
        verb = "must be one of" if " or " in expected else "must be"
        return ConfigProblem(path, f"{verb} {expected}, got {describe(value)}")
    if kind in _TYPE_PHRASES:
        return ConfigProblem(path, f"{_TYPE_PHRASES[kind]}, got {describe(value)}")
    bounds = {"greater_than_equal": ("≥", "ge"), "greater_than": (">", "gt")}
    bounds |= {"less_than_equal": ("≤", "le"), "less_than": ("<", "lt")}
    if kind in bounds:
        symbol, key = bounds[kind]
        return ConfigProblem(path, f"must be {symbol} {_number(ctx.get(key))}")
    if kind in ("too_short", "string_too_short"):
        return ConfigProblem(path, "must not be empty")
    if kind == "invalid-json-value":
        return ConfigProblem(path, f"must be a plain YAML/JSON value, got {describe(value)}")
    if kind == "recursion_loop":
        return ConfigProblem(path, "refers to itself")
    return ConfigProblem(path, f"is not valid, got {describe(value)}")


def _union_problem(kind: str, path: str, ctx: dict[str, Any], value: Any) -> ConfigProblem:
    key, names, noun = _DISCRIMINATORS.get(str(ctx.get("discriminator")), ("", (), "value"))
    if not key:  # pragma: no cover - every union of the schema is listed or has a custom error
        return ConfigProblem(path, f"is not valid, got {describe(value)}")
    if not isinstance(value, Mapping):
        return ConfigProblem(path, f"must be a mapping, got {describe(value)}")
    if key not in value:
        return ConfigProblem(f"{path}.{key}", "required")
    given = value[key]
    if kind == "union_tag_invalid" and isinstance(given, str):
        message = f'unknown {noun} "{given}"; expected one of {", ".join(names)}'
        close = difflib.get_close_matches(given, list(names), n=1, cutoff=0.6)
        return ConfigProblem(f"{path}.{key}", message + (f'; did you mean "{close[0]}"?' if close else ""))
    return ConfigProblem(f"{path}.{key}", f"must be one of {', '.join(names)}, got {describe(given)}")


# -- YAML ---------------------------------------------------------------------------------------
#
# Determined reads configs as YAML 1.2 (`1e-4` is a float, `on`/`yes` are strings, `2024-01-01`
# is a string, `010` is 10). PyYAML speaks YAML 1.1, so the loader below swaps the implicit
# resolvers for YAML 1.2's core schema, and refuses duplicate keys instead of keeping the last.

_Y = "tag:yaml.org,2002:"
_BOOL = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")
_INT = re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$")
_FLOAT = re.compile(
    r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
)


def _construct_bool(loader: Any, node: Any) -> bool:
    return str(loader.construct_scalar(node)).lower() == "true"


def _construct_int(loader: Any, node: Any) -> int:
    text = str(loader.construct_scalar(node))
    if text.startswith("0o"):
        return int(text[2:], 8)
    if text.startswith("0x"):
        return int(text[2:], 16)
    return int(text, 10)


def _construct_float(loader: Any, node: Any) -> float:
    text = str(loader.construct_scalar(node)).lower().replace(".inf", "inf").replace(".nan", "nan")
    return float(text)


def _construct_mapping(loader: Any, node: Any, deep: bool = False) -> Any:
    if isinstance(node, yaml.MappingNode):
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == _Y + "merge" or not isinstance(key_node, yaml.ScalarNode):
                continue
            key = loader.construct_object(key_node, deep=True)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping",
                    node.start_mark,
                    f'duplicate key "{key}"',
                    key_node.start_mark,
                )
            seen.add(key)
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


def _make_loader() -> Any:
    base: Any = yaml.SafeLoader
    replaced = {_Y + "bool", _Y + "int", _Y + "float", _Y + "timestamp"}
    resolvers = {
        first: [(tag, rx) for tag, rx in entries if tag not in replaced]
        for first, entries in base.yaml_implicit_resolvers.items()
    }
    loader: Any = type(
        "Yaml12Loader",
        (base,),
        {"yaml_implicit_resolvers": resolvers, "construct_mapping": _construct_mapping},
    )
    loader.add_implicit_resolver(_Y + "bool", _BOOL, list("tTfF"))
    loader.add_implicit_resolver(_Y + "int", _INT, list("-+0123456789"))
    loader.add_implicit_resolver(_Y + "float", _FLOAT, list("-+0123456789."))
    loader.add_constructor(_Y + "bool", _construct_bool)
    loader.add_constructor(_Y + "int", _construct_int)
    loader.add_constructor(_Y + "float", _construct_float)
    return loader


_LOADER = _make_loader()


def load_yaml_config(text: str) -> dict[str, Any]:
    """Parse config YAML into a mapping; syntax errors are a `<yaml>` problem naming line and column."""
    try:
        document = yaml.load(text, Loader=_LOADER)  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = exc.problem or exc.context or "not valid YAML"
        raise ConfigInvalidError([ConfigProblem(YAML_PATH, f"{where}{problem}")]) from None
    except yaml.YAMLError as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else "not valid YAML"
        raise ConfigInvalidError([ConfigProblem(YAML_PATH, first_line)]) from None
    except RecursionError:
        raise ConfigInvalidError([ConfigProblem(YAML_PATH, "nested too deeply")]) from None
    if document is None:
        raise ConfigInvalidError(
            [ConfigProblem(YAML_PATH, "the document is empty; expected a mapping of config fields")]
        )
    if not isinstance(document, dict):
        message = f"the top level must be a mapping of config fields, got {describe(document)}"
        raise ConfigInvalidError([ConfigProblem(YAML_PATH, message)])
    problems = list(_non_json_values(document, (), set()))
    if problems:
        raise ConfigInvalidError(problems)
    return document


def _non_json_values(value: Any, path: tuple[str | int, ...], active: set[int]) -> Iterator[ConfigProblem]:
    """YAML can build what JSON can't (`!!timestamp`, `!!binary`, anchors referring to themselves)."""
    if isinstance(value, str | int | float | bool) or value is None:
        return
    where = render_path(path) if path else YAML_PATH
    if not isinstance(value, dict | list):
        yield ConfigProblem(where, f"only plain YAML values are supported, got {describe(value)}")
        return
    if id(value) in active:
        yield ConfigProblem(where, "refers to itself")
        return
    active.add(id(value))
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _non_json_values(item, (*path, str(key)), active)
    else:
        for index, item in enumerate(value):
            yield from _non_json_values(item, (*path, index), active)
    active.discard(id(value))
