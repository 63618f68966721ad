"""Reading config YAML the way Determined does (YAML 1.2), into a plain JSON-like mapping.

Determined reads configs as YAML 1.2 (`1e-4` is a float, `on`/`yes` are strings, `2024-01-01`
is a string, `010` is 10). PyYAML speaks YAML 1.1, so the loader below swaps the implicit
resolvers for YAML 1.2's core schema, and refuses duplicate keys instead of keeping the last.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import yaml

from chalicelib.config._problems import describe, render_path
from chalicelib.config.errors import ConfigInvalidError, ConfigProblem

YAML_PATH = "<yaml>"

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
    if _expands_beyond(document, MAX_VALUES):
        message = (
            f"expands to more than {MAX_VALUES:,} values through aliases (anchors repeated inside anchors); "
            "write the values out instead"
        )
        raise ConfigInvalidError([ConfigProblem(YAML_PATH, message)])
    problems = list(_non_json_values(document, (), set()))
    if problems:
        raise ConfigInvalidError(problems)
    return document


#: Values a config may expand to through aliases: far beyond any real config, far below a "billion laughs".
MAX_VALUES = 100_000


def _expands_beyond(document: Any, limit: int) -> bool:
    """Whether walking `document` as JSON would visit more than `limit` values (aliases share objects, so
    a few lines of anchors can stand for billions of values once written out). A value that contains
    itself is not counted again: `_non_json_values` names it."""
    seen = 0

    def too_many(value: Any, active: set[int]) -> bool:
        nonlocal seen
        seen += 1
        if seen > limit:
            return True
        if not isinstance(value, dict | list) or id(value) in active:
            return False
        active.add(id(value))
        items = value.values() if isinstance(value, dict) else value
        if any(too_many(item, active) for item in items):
            return True
        active.discard(id(value))
        return False

    return too_many(document, set())


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
