"""Stratus' experiment config: Determined's experiment config file, validated.

Pure (pydantic, PyYAML and the standard library). Typical use::

    parsed = parse_yaml_config(text)          # or parse_experiment_config(mapping)
    parsed.config.searcher.metric
    parsed.warnings                           # fields accepted but ignored by Stratus

Problems raise `ConfigInvalidError`, whose `.problems` lists every one as `ConfigProblem(path,
message)`.
"""

from __future__ import annotations

from chalicelib.config._base import Length, LengthUnit, PositiveLength
from chalicelib.config.errors import ConfigError, ConfigInvalidError, ConfigProblem
from chalicelib.config.hyperparameters import (
    HYPERPARAMETER_TYPES,
    CategoricalHP,
    ConstHP,
    DoubleHP,
    HPGroup,
    Hyperparameter,
    HyperparameterLeaf,
    IntHP,
    LogHP,
    flatten_hyperparameters,
    unflatten_hyperparameters,
)
from chalicelib.config.load import ParsedConfig, load_yaml_config, parse_experiment_config, parse_yaml_config
from chalicelib.config.nni import NniTranslation, translate_nni
from chalicelib.config.schema import ExperimentConfig, SearcherLength, entrypoint_argv
from chalicelib.config.searcher import (
    SEARCHER_NAMES,
    AdaptiveASHASearcher,
    AnySearcher,
    BOHBSearcher,
    GridSearcher,
    HyperbandSearcher,
    PBTSearcher,
    RandomSearcher,
    SingleSearcher,
    TPESearcher,
)
from chalicelib.config.sections import (
    CheckpointStorageConfig,
    EnvironmentConfig,
    EnvironmentVariablesMap,
    ImageMap,
    ReproducibilityConfig,
    ResourcesConfig,
)

__all__ = [
    "HYPERPARAMETER_TYPES",
    "SEARCHER_NAMES",
    "AdaptiveASHASearcher",
    "AnySearcher",
    "BOHBSearcher",
    "CategoricalHP",
    "CheckpointStorageConfig",
    "ConfigError",
    "ConfigInvalidError",
    "ConfigProblem",
    "ConstHP",
    "DoubleHP",
    "EnvironmentConfig",
    "EnvironmentVariablesMap",
    "ExperimentConfig",
    "GridSearcher",
    "HPGroup",
    "HyperbandSearcher",
    "Hyperparameter",
    "HyperparameterLeaf",
    "ImageMap",
    "IntHP",
    "Length",
    "LengthUnit",
    "LogHP",
    "NniTranslation",
    "ParsedConfig",
    "PositiveLength",
    "RandomSearcher",
    "ReproducibilityConfig",
    "ResourcesConfig",
    "SearcherLength",
    "SingleSearcher",
    "PBTSearcher",
    "TPESearcher",
    "entrypoint_argv",
    "flatten_hyperparameters",
    "load_yaml_config",
    "parse_experiment_config",
    "parse_yaml_config",
    "translate_nni",
    "unflatten_hyperparameters",
]
