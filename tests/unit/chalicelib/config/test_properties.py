"""Property tests: any mapping either parses (and round-trips) or raises ConfigInvalidError."""

from __future__ import annotations

import copy
import math
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chalicelib.config import ConfigInvalidError, load_yaml_config, parse_experiment_config

BASE: dict[str, Any] = {
    "name": "prop",
    "entrypoint": "python3 train.py",
    "hyperparameters": {
        "global_batch_size": 32,
        "lr": {"type": "log", "minval": -4, "maxval": -1},
        "g": {"h": {"type": "int", "minval": 1, "maxval": 4, "count": 2}},
    },
    "searcher": {"name": "adaptive_asha", "metric": "loss", "max_trials": 8, "max_length": {"batches": 100}},
    "resources": {"slots_per_trial": 1},
    "environment": {"environment_variables": ["A=1"]},
}

# Names the schema knows at various levels, plus near misses, so mutations hit real validators.
KEYS = [
    "name", "entrypoint", "hyperparameters", "searcher", "resources", "checkpoint_storage",
    "min_validation_period", "max_restarts", "records_per_epoch", "environment", "reproducibility",
    "data", "labels", "bind_mounts", "sercher", "metric", "max_trials", "max_length", "time_metric",
    "max_time", "mode", "divisor", "type", "minval", "maxval", "count", "vals", "val", "base",
    "priority", "slots_per_trial", "shm_size", "image", "environment_variables", "cpu", "cuda",
    "batches", "epochs", "records", "experiment_seed", "bucket", "access_key", "lr", "g", "h",
]  # fmt: skip
NAMES = [
    "single",
    "grid",
    "random",
    "adaptive_asha",
    "tpe",
    "const",
    "int",
    "double",
    "log",
    "categorical",
    "s3",
]

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-3, max_value=2**33)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from(NAMES)
    | st.text(max_size=6)
)
values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(
            st.sampled_from(KEYS) | st.text(max_size=4) | st.integers(0, 3), children, max_size=4
        )
    ),
    max_leaves=12,
)
paths = st.lists(st.sampled_from(KEYS), min_size=1, max_size=3)
mutations = st.lists(st.tuples(paths, values | st.just("<delete>")), max_size=4)


def mutate(raw: dict[str, Any], path: list[str], value: Any) -> None:
    node: Any = raw
    for key in path[:-1]:
        if not isinstance(node, dict):
            return
        node = node.setdefault(key, {})
    if not isinstance(node, dict):
        return
    if value == "<delete>":
        node.pop(path[-1], None)
    else:
        node[path[-1]] = value


def check(raw: Any) -> None:
    try:
        parsed = parse_experiment_config(raw)
    except ConfigInvalidError as exc:
        assert exc.problems
        for problem in exc.problems:
            assert problem.path and problem.message
            assert "Input should" not in problem.message
            assert "[key]" not in problem.path or "[key]" in repr(raw)  # pydantic's marker, not a user key
        assert str(exc).startswith("config has ")
        return
    dumped = parsed.config.model_dump(mode="json")
    assert parse_experiment_config(dumped).config == parsed.config


@settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutations)
def test_mutated_configs_parse_or_raise_config_invalid(changes: list[tuple[list[str], Any]]) -> None:
    raw = copy.deepcopy(BASE)
    for path, value in changes:
        mutate(raw, path, value)
    check(raw)


@settings(max_examples=100, deadline=None, database=None)
@given(st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=5), values, max_size=6))
def test_random_mappings_parse_or_raise_config_invalid(raw: dict[str, Any]) -> None:
    check(raw)


@settings(max_examples=200, deadline=None, database=None)
@given(st.text(alphabet=" \t\n:-[]{}&*!|>'\"%@`#,?abc123.eE", max_size=60))
def test_random_yaml_text_loads_or_raises_config_invalid(text: str) -> None:
    try:
        data = load_yaml_config(text)
    except ConfigInvalidError as exc:
        assert exc.problems
        return
    assert isinstance(data, dict)


def test_valid_base_parses() -> None:
    config = parse_experiment_config(BASE).config
    assert not math.isnan(config.resources.weight)
