"""The `hyperparameters` section: Determined's hyperparameter types and nested groups.

Each entry of the mapping is one of:

- a bare value (number, string, list, bool, null): a constant, read as `{type: const, val: <value>}`;
- a mapping with `type`: `const` (`val`), `int` (`minval`, `maxval`, optional `count` for grid
  search), `double` (`minval`, `maxval`, `count`), `log` (`base` default 10, `minval`/`maxval` as
  exponents, `count`) or `categorical` (`vals`, non-empty);
- a mapping without `type`: a nested group of hyperparameters, recursively.

The models dump to Determined's JSON form (`{"type": "int", "minval": 1, ...}`; groups as plain
mappings), which is what the searchers sample from. Sampling itself lives with the searchers.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    JsonValue,
    RootModel,
    Tag,
    model_validator,
)

from chalicelib.config._base import StrictModel, raise_problems

__all__ = [
    "HYPERPARAMETER_TYPES",
    "CategoricalHP",
    "ConstHP",
    "DoubleHP",
    "HPGroup",
    "Hyperparameter",
    "HyperparameterLeaf",
    "IntHP",
    "LogHP",
    "flatten_hyperparameters",
    "leaf_locations",
    "unflatten_hyperparameters",
]

HYPERPARAMETER_TYPES: tuple[str, ...] = ("const", "int", "double", "log", "categorical")


class ConstHP(StrictModel):
    """A constant: every trial gets `val` (any JSON value, null included)."""

    drop_nulls = False  # `val: null` is a legitimate constant

    type: Literal["const"] = "const"
    val: JsonValue


class _RangeHP(StrictModel):
    @model_validator(mode="after")
    def _ordered(self) -> _RangeHP:
        minval = getattr(self, "minval")  # noqa: B009 - declared by the subclasses
        maxval = getattr(self, "maxval")  # noqa: B009
        if minval > maxval:
            message = f"must be ≤ maxval ({maxval}), got {minval}"
            raise_problems(type(self).__name__, [(("minval",), message, minval)])
        return self


class IntHP(_RangeHP):
    """An integer drawn from [minval, maxval] (inclusive); `count` values for grid search."""

    type: Literal["int"] = "int"
    minval: int
    maxval: int
    count: int | None = Field(default=None, ge=1)


class DoubleHP(_RangeHP):
    """A float drawn uniformly from [minval, maxval]; `count` values for grid search."""

    type: Literal["double"] = "double"
    minval: float
    maxval: float
    count: int | None = Field(default=None, ge=1)


class LogHP(_RangeHP):
    """`base ** x` with x drawn uniformly from [minval, maxval] (exponents)."""

    type: Literal["log"] = "log"
    base: float = Field(default=10.0, gt=0)
    minval: float
    maxval: float
    count: int | None = Field(default=None, ge=1)


class CategoricalHP(StrictModel):
    """One of `vals` (any JSON values), chosen uniformly."""

    type: Literal["categorical"] = "categorical"
    vals: list[JsonValue] = Field(min_length=1)


HyperparameterLeaf = ConstHP | IntHP | DoubleHP | LogHP | CategoricalHP


def _hp_kind(value: Any) -> str | None:
    """The union tag of a raw (or already built) hyperparameter."""
    if isinstance(value, HPGroup):
        return "nested"
    if isinstance(value, StrictModel):
        kind = getattr(value, "type", None)
        return kind if isinstance(kind, str) else None
    if isinstance(value, dict):
        if "type" not in value:
            return "nested"
        kind = value["type"]
        return kind if isinstance(kind, str) else None
    return "bare"


def _bare_to_const(value: Any) -> Any:
    if isinstance(value, ConstHP):
        return value
    return {"type": "const", "val": value}


HyperparameterValue = Annotated[
    Annotated[ConstHP, Tag("const")]
    | Annotated[IntHP, Tag("int")]
    | Annotated[DoubleHP, Tag("double")]
    | Annotated[LogHP, Tag("log")]
    | Annotated[CategoricalHP, Tag("categorical")]
    | Annotated["HPGroup", Tag("nested")]
    | Annotated[ConstHP, BeforeValidator(_bare_to_const), Tag("bare")],
    Discriminator(_hp_kind),
]


class HPGroup(RootModel[dict[str, HyperparameterValue]]):
    """A nested group: a mapping of names to hyperparameters (leaves or further groups)."""

    model_config = ConfigDict(strict=True, frozen=True)

    def __getitem__(self, name: str) -> Hyperparameter:
        return self.root[name]

    def items(self) -> Iterator[tuple[str, Hyperparameter]]:
        return iter(self.root.items())


HPGroup.model_rebuild()

Hyperparameter = HyperparameterLeaf | HPGroup


def flatten_hyperparameters(
    hyperparameters: Mapping[str, Hyperparameter],
) -> dict[tuple[str, ...], HyperparameterLeaf]:
    """Every leaf of the (nested) space, keyed by its path of names, in declaration order."""
    out: dict[tuple[str, ...], HyperparameterLeaf] = {}

    def walk(prefix: tuple[str, ...], group: Mapping[str, Hyperparameter]) -> None:
        for name, spec in group.items():
            if isinstance(spec, HPGroup):
                walk((*prefix, name), spec.root)
            else:
                out[(*prefix, name)] = spec

    walk((), hyperparameters)
    return out


def unflatten_hyperparameters(values: Mapping[tuple[str, ...], Any]) -> dict[str, Any]:
    """Build the nested hparams mapping a trial receives from values keyed by leaf path."""
    out: dict[str, Any] = {}
    for path, value in values.items():
        if not path:
            raise ValueError("a hyperparameter path needs at least one name")
        node = out
        for name in path[:-1]:
            child = node.setdefault(name, {})
            if not isinstance(child, dict):
                raise ValueError(f"{'.'.join(path)}: {name} is both a value and a group")
            node = child
        node[path[-1]] = value
    return out


def leaf_locations(
    hyperparameters: Mapping[str, Hyperparameter],
) -> Iterator[tuple[tuple[str, ...], HyperparameterLeaf]]:
    """Each leaf with its validation location (names interleaved with union tags).

    Used to report problems found across sections (e.g. grid search needs `count`) at the same
    paths as the field errors.
    """

    def walk(prefix: tuple[str, ...], group: Mapping[str, Hyperparameter]) -> Iterator[Any]:
        for name, spec in group.items():
            if isinstance(spec, HPGroup):
                yield from walk((*prefix, name, "nested"), spec.root)
            else:
                yield (*prefix, name, spec.type), spec

    yield from walk(("hyperparameters",), hyperparameters)
