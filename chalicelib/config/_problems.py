"""Pydantic's validation errors turned into `ConfigProblem`s a user can act on.

Pydantic's own error text never reaches the user: each validation error becomes a `ConfigProblem`
whose path is the dotted path the user wrote (union tags dropped, list indices as `[i]`) and whose
message is a short phrase chosen here (or written by the model's validators). `describe` and
`render_path` render values and paths the same way for the YAML reader.
"""

from __future__ import annotations

import difflib
import json
import types
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, ForwardRef, Union, get_args, get_origin

from pydantic import BaseModel, JsonValue, RootModel, Tag, ValidationError
from pydantic_core import ErrorDetails

from chalicelib.config.errors import ConfigProblem
from chalicelib.config.hyperparameters import HYPERPARAMETER_TYPES
from chalicelib.config.schema import ExperimentConfig
from chalicelib.config.searcher import SEARCHER_NAMES

ROOT_PATH = "<config>"


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
