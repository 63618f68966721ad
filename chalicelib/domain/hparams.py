"""Sampling hyperparameters from a search space, following Determined's rules.

The space is the JSON form of the config's `hyperparameters` (what `ExperimentConfig.model_dump`
gives): each leaf is `{"type": "const"|"int"|"double"|"log"|"categorical", ...}`, and a mapping
without `type` is a nested group. Sampling is driven by a caller-supplied `random.Random`, so an
experiment seed makes a search reproducible.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from typing import Any

HParams = dict[str, Any]


def is_leaf(spec: Any) -> bool:
    return isinstance(spec, Mapping) and isinstance(spec.get("type"), str)


def sample(space: Mapping[str, Any], rng: random.Random) -> HParams:
    out: HParams = {}
    for name in sorted(space):
        spec = space[name]
        if is_leaf(spec):
            out[name] = sample_leaf(spec, rng)
        elif isinstance(spec, Mapping):
            out[name] = sample(spec, rng)
        else:  # a bare value is a constant
            out[name] = spec
    return out


def sample_leaf(spec: Mapping[str, Any], rng: random.Random) -> Any:
    kind = spec["type"]
    if kind == "const":
        return spec["val"]
    if kind == "int":
        return rng.randint(int(spec["minval"]), int(spec["maxval"]))  # inclusive, as in Determined
    if kind == "double":
        return rng.uniform(float(spec["minval"]), float(spec["maxval"]))
    if kind == "log":
        base = float(spec.get("base", 10.0))
        return float(base ** rng.uniform(float(spec["minval"]), float(spec["maxval"])))
    if kind == "categorical":
        return rng.choice(list(spec["vals"]))
    raise ValueError(f"unknown hyperparameter type {kind!r}")


def request_rng(seed: int, index: int) -> random.Random:
    """A generator for a searcher's `index`-th request: reproducible from the experiment seed alone.

    String seeds are hashed with SHA-512 by `random.Random`, so the stream does not depend on the
    interpreter's hash randomisation.
    """
    return random.Random(f"stratus-request:{int(seed)}:{int(index)}")


def grid_points(space: Mapping[str, Any]) -> list[HParams]:
    """Determined's grid: the cartesian product of every hyperparameter's grid values.

    Axes are taken in sorted name order (nested groups recursively), the first axis varying slowest.
    `int`, `double` and `log` need `count` (`int` clamps it to the number of integers in the range,
    rounds half away from zero like Go's `math.Round` and drops duplicates); `categorical` gives its
    `vals`; `const` and bare values give one value. A space with no hyperparameters has one point, `{}`.
    """
    axes: list[tuple[tuple[str, ...], list[Any]]] = []
    _grid_axes(space, (), axes)
    points: list[list[Any]] = [[]]
    for _, values in axes:
        points = [[*point, value] for point in points for value in values]
    out: list[HParams] = []
    for point in points:
        sample = _group_skeleton(space)
        for (path, _), value in zip(axes, point, strict=True):
            target = sample
            for key in path[:-1]:
                target = target[key]
            target[path[-1]] = value
        out.append(sample)
    return out


def _group_skeleton(space: Mapping[str, Any]) -> HParams:
    """Empty dicts for every nested group, so even an empty group appears in the sample."""
    return {
        name: _group_skeleton(spec)
        for name, spec in sorted(space.items())
        if isinstance(spec, Mapping) and not is_leaf(spec)
    }


def _grid_axes(
    space: Mapping[str, Any], prefix: tuple[str, ...], axes: list[tuple[tuple[str, ...], list[Any]]]
) -> None:
    for name in sorted(space):
        spec = space[name]
        path = (*prefix, name)
        if is_leaf(spec):
            axes.append((path, grid_values(spec, ".".join(path))))
        elif isinstance(spec, Mapping):
            _grid_axes(spec, path, axes)
        else:  # a bare value is a constant
            axes.append((path, [spec]))


def grid_values(spec: Mapping[str, Any], name: str = "hyperparameter") -> list[Any]:
    """The grid values of one leaf (see `grid_points`)."""
    kind = spec["type"]
    if kind == "const":
        return [spec["val"]]
    if kind == "categorical":
        return list(spec["vals"])
    if kind not in ("int", "double", "log"):
        raise ValueError(f"unknown hyperparameter type {kind!r}")
    if spec.get("count") is None:
        raise ValueError(f"{name}: the grid searcher needs `count` for a {kind} hyperparameter")
    count = int(spec["count"])
    if count < 1:
        raise ValueError(f"{name}: `count` must be at least 1, got {count}")
    if kind == "int":
        lo, hi = int(spec["minval"]), int(spec["maxval"])
        count = min(count, hi - lo + 1)
        if count == 1:
            ints = [_round_half_away((lo + hi) / 2.0)]
        else:
            ints = [_round_half_away(lo + i * (hi - lo) / (count - 1)) for i in range(count)]
        return list(dict.fromkeys(ints))  # de-duplicated, in order
    lo_f, hi_f = float(spec["minval"]), float(spec["maxval"])
    if count == 1:
        exponents = [(lo_f + hi_f) / 2.0]
    else:
        exponents = [lo_f + i * (hi_f - lo_f) / (count - 1) for i in range(count)]
    if kind == "double":
        return exponents
    base = float(spec.get("base", 10.0))
    return [float(base**x) for x in exponents]


def _round_half_away(x: float) -> int:
    """Go's `math.Round`: halves round away from zero (Python's `round` rounds them to even)."""
    magnitude = abs(x)
    whole = math.floor(magnitude)
    if magnitude - whole >= 0.5:
        whole += 1
    return int(whole) if x >= 0 else -int(whole)
