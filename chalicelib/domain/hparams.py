"""Sampling hyperparameters from a search space, following Determined's rules.

The space is the JSON form of the config's `hyperparameters` (what `ExperimentConfig.model_dump`
gives): each leaf is `{"type": "const"|"int"|"double"|"log"|"categorical", ...}`, and a mapping
without `type` is a nested group. Sampling is driven by a caller-supplied `random.Random`, so an
experiment seed makes a search reproducible.
"""

from __future__ import annotations

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
