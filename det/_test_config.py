"""The config of a one-batch test experiment (`make_test_config`), and the values its trial gets.

From the config as loaded (file + ``--config`` overrides):

* ``searcher``: ``{name: single, metric, smaller_is_better, max_length: {batches: 1}}`` (``metric`` and
  ``smaller_is_better`` copied when the original has them; ``time_metric``/``max_time`` dropped);
* ``hyperparameters``: every non-constant one becomes ``{type: const, val: ...}`` with a deterministic
  value: ``int``/``double`` their ``minval``, ``log`` ``base ** minval``, ``categorical`` its first
  value; nested groups recursively; constants (bare or ``type: const``) stay as written;
* ``min_validation_period`` and ``min_checkpoint_period`` removed, ``max_restarts: 0``,
  ``scheduling_unit: 1``, and `` (test mode)`` appended to the name (the config file's stem when the
  config has no name).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

from det.errors import UsageError

Json = dict[str, Any]

NAME_SUFFIX = " (test mode)"
HP_TYPES = ("const", "int", "double", "log", "categorical")


def make_test_config(config: Mapping[str, Any], *, default_name: str = "Experiment") -> dict[str, Any]:
    """The config of the one-batch test experiment (see the module docstring); `config` is not changed."""
    test = copy.deepcopy(dict(config))
    searcher = config.get("searcher")
    original = searcher if isinstance(searcher, Mapping) else {}
    single: dict[str, Any] = {"name": "single"}
    for key in ("metric", "smaller_is_better"):
        if key in original:
            single[key] = copy.deepcopy(original[key])
    single["max_length"] = {"batches": 1}
    test["searcher"] = single
    hyperparameters = config.get("hyperparameters")
    if isinstance(hyperparameters, Mapping):
        test["hyperparameters"] = test_hyperparameters(hyperparameters)
    test.pop("min_validation_period", None)
    test.pop("min_checkpoint_period", None)
    test["max_restarts"] = 0
    test["scheduling_unit"] = 1
    name = config.get("name")
    test["name"] = f"{name if name not in (None, '') else default_name}{NAME_SUFFIX}"
    return test


def test_hyperparameters(hyperparameters: Mapping[str, Any], where: str = "hyperparameters") -> Json:
    """Every hyperparameter as a constant: ranges at their low end, categoricals at their first value."""

    def as_constant(spec: Any, path: str) -> Any:
        if isinstance(spec, Mapping) and spec.get("type") != "const":
            return {"type": "const", "val": _test_value(spec, path)}
        return copy.deepcopy(spec)  # a constant, bare or `type: const`

    return _each_hyperparameter(hyperparameters, where, as_constant)


def hparam_values(hyperparameters: Mapping[str, Any], where: str = "hyperparameters") -> Json:
    """The values a trial gets for (constant) `hyperparameters`, nested like the groups."""

    def value(spec: Any, path: str) -> Any:
        return _test_value(spec, path) if isinstance(spec, Mapping) else copy.deepcopy(spec)

    return _each_hyperparameter(hyperparameters, where, value)


def _each_hyperparameter(
    hyperparameters: Mapping[str, Any], where: str, leaf: Callable[[Any, str], Any]
) -> Json:
    """``leaf(spec, path)`` for every hyperparameter, nested groups (mappings without ``type``) kept."""
    out: Json = {}
    for name, spec in hyperparameters.items():
        path = f"{where}.{name}"
        if isinstance(spec, Mapping) and "type" not in spec:
            out[name] = _each_hyperparameter(spec, path, leaf)
        else:
            out[name] = leaf(spec, path)
    return out


def _test_value(spec: Mapping[str, Any], path: str) -> Any:
    kind = spec.get("type")
    try:
        if kind == "const":
            return copy.deepcopy(spec["val"])
        if kind == "int":
            return spec["minval"]
        if kind == "double":
            return float(spec["minval"])
        if kind == "log":
            base = spec.get("base")
            return float(10 if base is None else base) ** float(spec["minval"])
        if kind == "categorical":
            return copy.deepcopy(spec["vals"][0])
    except (KeyError, IndexError, TypeError, ValueError) as e:
        raise UsageError(
            f"{path} of type {kind} has no usable {_missing_field(kind)}; fix the hyperparameter"
        ) from e
    raise UsageError(f"{path} has type {kind!r}, which is not one of {', '.join(HP_TYPES)}; fix its type")


def _missing_field(kind: object) -> str:
    return {"const": "val", "categorical": "vals (a non-empty list)"}.get(str(kind), "minval")
