"""The experiment config: Determined's example configs parse, defaults, every error case."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from chalicelib.config import (
    SEARCHER_NAMES,
    AdaptiveASHASearcher,
    CategoricalHP,
    ConfigInvalidError,
    ConfigProblem,
    ConstHP,
    DoubleHP,
    ExperimentConfig,
    HPGroup,
    IntHP,
    Length,
    LogHP,
    RandomSearcher,
    SingleSearcher,
    parse_experiment_config,
    parse_yaml_config,
)

# -- Determined-style example configs -------------------------------------------------------------

MNIST_CONST = """
name: mnist_pytorch_const
description: MNIST with constant hyperparameters
labels: [mnist, tutorial]
data:
  url: https://example.invalid/mnist.tar.gz
hyperparameters:
  learning_rate: 1.0
  global_batch_size: 64
  n_filters1: 32
  n_filters2: 64
  dropout1: 0.25
  dropout2: 0.5
searcher:
  name: single
  metric: validation_loss
  max_length:
    batches: 937
  smaller_is_better: true
entrypoint: python3 -m determined.launch.torch_distributed python3 train.py
max_restarts: 0
"""

ASHA_NESTED_EPOCHS = """
name: cifar10_asha
entrypoint: model_def:CIFARTrial
records_per_epoch: 50000
min_validation_period:
  epochs: 1
hyperparameters:
  global_batch_size: 128
  optimizer:
    lr:
      type: log
      minval: -4.0
      maxval: -1.0
      base: 10
    momentum:
      type: double
      minval: 0.2
      maxval: 1.0
    nesterov:
      type: categorical
      vals: [true, false]
  layers:
    type: int
    minval: 2
    maxval: 8
  arch:
    depth: {type: const, val: 3}
    width: 256
searcher:
  name: adaptive_asha
  metric: validation_error
  smaller_is_better: true
  max_trials: 64
  max_length:
    epochs: 32
  mode: aggressive
  max_concurrent_trials: 8
resources:
  slots_per_trial: 2
  resource_pool: gpu-pool
"""

ASHA_TIME_METRIC = """
name: asha-time-metric
entrypoint: [python3, train.py, --epochs, "10"]
hyperparameters:
  lr: {type: log, minval: -5, maxval: -2}
  batch_size: {type: categorical, vals: [16, 32, 64]}
searcher:
  name: adaptive_asha
  metric: val_acc
  smaller_is_better: false
  max_trials: 100
  time_metric: batches
  max_time: 1000
  divisor: 3
  max_rungs: 4
"""

RANDOM_ENV = """
name: random-search
entrypoint: cd src && python3 train.py
hyperparameters:
  global_batch_size: 32
  hidden: {type: int, minval: 16, maxval: 256}
  dropout: {type: double, minval: 0.0, maxval: 0.5}
searcher:
  name: random
  metric: loss
  max_trials: 20
  max_length: 500
  max_concurrent_trials: 4
environment:
  image:
    cpu: determinedai/pytorch-ngc:0.38.0-cpu
    cuda: determinedai/pytorch-ngc:0.38.0-cuda
  environment_variables:
    - NCCL_DEBUG=INFO
    - WANDB_MODE=offline
    - EXTRA=a=b
resources:
  slots_per_trial: 1
  priority: 10
  weight: 2.5
  shm_size: 4G
checkpoint_storage:
  type: s3
  bucket: my-bucket
  prefix: experiments
  save_trial_best: 2
reproducibility:
  experiment_seed: 1234
workspace: research
project: vision
"""

EXAMPLES = [MNIST_CONST, ASHA_NESTED_EPOCHS, ASHA_TIME_METRIC, RANDOM_ENV]

MINIMAL: dict[str, Any] = {
    "entrypoint": "python3 train.py",
    "searcher": {"name": "single", "metric": "loss"},
}

KNOWN_SEARCHERS = ", ".join(SEARCHER_NAMES)


def with_changes(**changes: Any) -> dict[str, Any]:
    raw = copy.deepcopy(MINIMAL)
    raw.update(changes)
    return raw


def problems_of(raw: Any) -> list[str]:
    with pytest.raises(ConfigInvalidError) as info:
        parse_experiment_config(raw)
    return [str(p) for p in info.value.problems]


def test_const_single_example() -> None:
    parsed = parse_yaml_config(MNIST_CONST)
    config = parsed.config
    assert parsed.warnings == []
    assert config.name == "mnist_pytorch_const"
    assert config.labels == ["mnist", "tutorial"]
    assert isinstance(config.searcher, SingleSearcher)
    assert config.searcher.max_length == Length(batches=937)
    assert config.hyperparameters["learning_rate"] == ConstHP(val=1.0)
    assert config.global_batch_size == 64
    assert config.max_restarts == 0
    assert config.data == {"url": "https://example.invalid/mnist.tar.gz"}


def test_asha_nested_example() -> None:
    config = parse_yaml_config(ASHA_NESTED_EPOCHS).config
    assert isinstance(config.searcher, AdaptiveASHASearcher)
    assert config.searcher.max_length == Length(epochs=32)
    assert not config.searcher.uses_time_metric
    assert config.searcher.mode == "aggressive"
    assert config.searcher.max_concurrent_trials == 8
    optimizer = config.hyperparameters["optimizer"]
    assert isinstance(optimizer, HPGroup)
    assert optimizer["lr"] == LogHP(minval=-4.0, maxval=-1.0, base=10.0)
    assert optimizer["nesterov"] == CategoricalHP(vals=[True, False])
    arch = config.hyperparameters["arch"]
    assert isinstance(arch, HPGroup)
    assert arch["width"] == ConstHP(val=256)
    assert config.hyperparameters["layers"] == IntHP(minval=2, maxval=8)
    assert config.min_validation_period == Length(epochs=1)
    assert config.resources.slots_per_trial == 2
    assert config.resources.resource_pool == "gpu-pool"
    assert config.searcher_max_length_batches() == 32 * 50000 // 128


def test_asha_time_metric_example() -> None:
    config = parse_yaml_config(ASHA_TIME_METRIC).config
    searcher = config.searcher
    assert isinstance(searcher, AdaptiveASHASearcher)
    assert searcher.uses_time_metric
    assert (searcher.time_metric, searcher.max_time) == ("batches", 1000)
    assert searcher.max_length is None
    assert searcher.divisor == 3.0
    assert searcher.max_rungs == 4
    assert searcher.smaller_is_better is False
    assert config.entrypoint == ["python3", "train.py", "--epochs", "10"]
    assert config.searcher_max_length_batches() is None


def test_random_example_with_environment() -> None:
    parsed = parse_yaml_config(RANDOM_ENV)
    config = parsed.config
    # Accepted and kept, but Stratus does not act on them: each is named in a warning.
    warned = [w.split(":")[0] for w in parsed.warnings]
    assert warned == [
        "workspace",
        "project",
        "resources.shm_size",
        "checkpoint_storage.bucket",
        "checkpoint_storage.prefix",
    ]
    assert isinstance(config.searcher, RandomSearcher)
    assert config.searcher.max_length == Length(batches=500)
    assert config.searcher.max_trials == 20
    assert config.hyperparameters["dropout"] == DoubleHP(minval=0.0, maxval=0.5)
    env = config.environment
    assert env.image_for(gpu=False) == "determinedai/pytorch-ngc:0.38.0-cpu"
    assert env.image_for(gpu=True) == "determinedai/pytorch-ngc:0.38.0-cuda"
    assert env.variables_for(gpu=True) == {"NCCL_DEBUG": "INFO", "WANDB_MODE": "offline", "EXTRA": "a=b"}
    assert config.resources.priority == 10
    assert config.resources.weight == 2.5
    assert config.resources.shm_size == "4G"
    assert config.checkpoint_storage.bucket == "my-bucket"
    assert config.checkpoint_storage.save_trial_best == 2
    assert config.reproducibility.experiment_seed == 1234
    assert (config.workspace, config.project) == ("research", "vision")


@pytest.mark.parametrize("text", EXAMPLES)
def test_examples_round_trip(text: str) -> None:
    parsed = parse_yaml_config(text)
    config = parsed.config
    dumped = config.model_dump(mode="json")
    again = parse_experiment_config(dumped)
    assert again.config == config
    assert again.config.model_dump(mode="json") == dumped
    assert again.warnings == parsed.warnings  # the defaults filled in add no warning


# -- defaults ---------------------------------------------------------------------------------------


def test_defaults_are_determineds() -> None:
    config = parse_experiment_config(MINIMAL).config
    assert config.name is None  # filled by the service
    assert config.description is None
    assert config.labels == []
    assert config.hyperparameters == {}
    assert config.searcher == SingleSearcher(metric="loss")
    assert config.searcher.smaller_is_better is True
    assert config.searcher.max_length is None
    r = config.resources
    assert (r.slots_per_trial, r.resource_pool, r.priority, r.weight) == (1, "default", 42, 1.0)
    assert (r.max_slots, r.shm_size, r.devices, r.is_single_node) == (None, None, [], False)
    c = config.checkpoint_storage
    assert (c.type, c.bucket, c.prefix) == ("s3", None, None)
    assert (c.save_experiment_best, c.save_trial_best, c.save_trial_latest) == (0, 1, 1)
    assert config.checkpoint_policy == "best"
    assert config.min_validation_period == Length(batches=0)
    assert config.min_checkpoint_period == Length(batches=0)
    assert config.max_restarts == 5
    assert config.scheduling_unit == 100
    assert config.records_per_epoch == 0
    assert config.perform_initial_validation is False
    assert config.environment.image is None
    assert config.environment.environment_variables == []
    assert config.reproducibility.experiment_seed is None  # filled by the service
    assert config.preemption_timeout == 3600
    assert config.data == {}
    assert config.debug is False
    assert (config.workspace, config.project) == (None, None)
    assert config.log_policies == []


@pytest.mark.parametrize(
    ("searcher", "expected"),
    [
        ({"name": "grid", "metric": "m"}, {"max_concurrent_trials": 16}),
        ({"name": "random", "metric": "m", "max_trials": 5}, {"max_concurrent_trials": 16}),
        ({"name": "tpe", "metric": "m", "max_trials": 5}, {"max_concurrent_trials": 16}),
        (
            {"name": "adaptive_asha", "metric": "m", "max_trials": 5, "max_length": 100},
            {
                "divisor": 4.0,
                "max_rungs": 5,
                "mode": "standard",
                "bracket_rungs": None,
                "stop_once": False,
                "max_concurrent_trials": 16,
                "smaller_is_better": True,
            },
        ),
    ],
)
def test_searcher_defaults(searcher: dict[str, Any], expected: dict[str, Any]) -> None:
    config = parse_experiment_config(with_changes(searcher=searcher)).config
    for name, value in expected.items():
        assert getattr(config.searcher, name) == value


def test_null_means_default() -> None:
    config = parse_experiment_config(
        with_changes(max_restarts=None, resources={"priority": None}, description=None)
    ).config
    assert config.max_restarts == 5
    assert config.resources.priority == 42


def test_bare_hyperparameter_values_are_constants() -> None:
    raw = with_changes(
        hyperparameters={
            "a": 1,
            "b": "adam",
            "c": [1, 2],
            "d": None,
            "e": True,
            "nested": {"f": 0.5},
        }
    )
    config = parse_experiment_config(raw).config
    hps = config.hyperparameters
    assert hps["a"] == ConstHP(val=1)
    assert hps["b"] == ConstHP(val="adam")
    assert hps["c"] == ConstHP(val=[1, 2])
    assert hps["d"] == ConstHP(val=None)
    assert hps["e"] == ConstHP(val=True)
    nested = hps["nested"]
    assert isinstance(nested, HPGroup)
    assert nested["f"] == ConstHP(val=0.5)
    dumped = config.model_dump(mode="json")["hyperparameters"]
    assert dumped["a"] == {"type": "const", "val": 1}
    assert dumped["nested"] == {"f": {"type": "const", "val": 0.5}}
    assert parse_experiment_config(config.model_dump(mode="json")).config == config


def test_models_can_be_built_in_python() -> None:
    config = ExperimentConfig(
        entrypoint="python3 train.py",
        searcher=RandomSearcher(metric="loss", max_trials=3),
        hyperparameters={"lr": DoubleHP(minval=0.1, maxval=0.2)},
    )
    assert parse_experiment_config(config.model_dump(mode="json")).config == config


# -- errors -----------------------------------------------------------------------------------------

ERROR_CASES: list[tuple[dict[str, Any], str]] = [
    ({"searcher": {"name": "single", "metric": "m"}}, "entrypoint: required"),
    ({"entrypoint": "x"}, "searcher: required"),
    (with_changes(searcher={"name": "single"}), "searcher.metric: required"),
    (with_changes(searcher={"name": "single", "metric": ""}), "searcher.metric: must not be empty"),
    (with_changes(searcher={"name": "random", "metric": "m"}), "searcher.max_trials: required"),
    (
        with_changes(searcher={"name": "random", "metric": "m", "max_trials": 0}),
        "searcher.max_trials: must be ≥ 1",
    ),
    (
        with_changes(
            searcher={"name": "random", "metric": "m", "max_trials": 2, "max_concurrent_trials": -1}
        ),
        "searcher.max_concurrent_trials: must be ≥ 0",
    ),
    (with_changes(searcher={"metric": "m"}), "searcher.name: required"),
    (with_changes(searcher="random"), 'searcher: must be a mapping, got "random"'),
    (
        with_changes(searcher={"name": "adaptive", "metric": "m"}),
        f'searcher.name: unknown searcher "adaptive"; expected one of {KNOWN_SEARCHERS}; '
        'did you mean "adaptive_asha"?',
    ),
    (
        with_changes(searcher={"name": "smac", "metric": "m"}),
        f'searcher.name: unknown searcher "smac"; expected one of {KNOWN_SEARCHERS}',
    ),
    (
        with_changes(
            searcher={
                "name": "pbt",
                "metric": "m",
                "population_size": 2,
                "num_rounds": 2,
                "replace_function": {"truncate_fraction": 0.5},
                "explore_function": {"resample_probability": 0.2, "perturb_factor": 0.2},
            }
        ),
        "searcher.length_per_round: required",
    ),
    (
        with_changes(searcher={"name": 7, "metric": "m"}),
        f"searcher.name: must be one of {KNOWN_SEARCHERS}, got 7",
    ),
    (
        with_changes(searcher={"name": "adaptive_asha", "metric": "m", "max_trials": 4}),
        "searcher: adaptive_asha needs max_length, or time_metric and max_time",
    ),
    (
        with_changes(
            searcher={
                "name": "adaptive_asha",
                "metric": "m",
                "max_trials": 4,
                "max_length": 10,
                "time_metric": "batches",
                "max_time": 10,
            }
        ),
        "searcher: set either max_length, or time_metric and max_time, not both",
    ),
    (
        with_changes(searcher={"name": "adaptive_asha", "metric": "m", "max_trials": 4, "time_metric": "b"}),
        "searcher.max_time: required with time_metric",
    ),
    (
        with_changes(searcher={"name": "adaptive_asha", "metric": "m", "max_trials": 4, "max_time": 9}),
        "searcher.time_metric: required with max_time",
    ),
    (
        with_changes(
            searcher={
                "name": "adaptive_asha",
                "metric": "m",
                "max_trials": 4,
                "max_length": 9,
                "mode": "fast",
            }
        ),
        'searcher.mode: must be one of "aggressive", "standard" or "conservative", got "fast"',
    ),
    (
        with_changes(
            searcher={"name": "adaptive_asha", "metric": "m", "max_trials": 4, "max_length": 9, "divisor": 1}
        ),
        "searcher.divisor: must be > 1",
    ),
    (
        with_changes(searcher={"name": "single", "metric": "m", "max_length": {"batches": 1, "epochs": 1}}),
        "searcher.max_length: must set exactly one of batches, records or epochs",
    ),
    (
        with_changes(searcher={"name": "single", "metric": "m", "max_length": {}}),
        "searcher.max_length: must set exactly one of batches, records or epochs",
    ),
    (
        with_changes(searcher={"name": "single", "metric": "m", "max_length": {"epochs": 0}}),
        "searcher.max_length.epochs: must be ≥ 1",
    ),
    (
        with_changes(searcher={"name": "single", "metric": "m", "max_length": "10"}),
        "searcher.max_length: must be a number of batches, or one of {batches: N}, {records: N}, "
        '{epochs: N}, got "10"',
    ),
    (
        with_changes(searcher={"name": "single", "metric": "m", "max_length": {"batch": 10}}),
        'searcher.max_length.batch: unknown field "batch"; did you mean "batches"?',
    ),
    (
        with_changes(searcher={"name": "single", "metric": "m", "max_trials": 3}),
        'searcher.max_trials: unknown field "max_trials"',
    ),
    (with_changes(entrypoint=""), "entrypoint: must not be empty"),
    (with_changes(entrypoint=[]), "entrypoint: must not be empty"),
    (with_changes(entrypoint=["python3", 3]), "entrypoint[1]: must be a string, got 3"),
    (with_changes(entrypoint=3), "entrypoint: must be a command string or a list of strings, got 3"),
    (
        with_changes(hyperparameters={"lr": {"type": "double", "minval": 0.5, "maxval": 0.1}}),
        "hyperparameters.lr.minval: must be ≤ maxval (0.1), got 0.5",
    ),
    (
        with_changes(hyperparameters={"n": {"type": "int", "minval": 1, "maxval": 1.5}}),
        "hyperparameters.n.maxval: must be an integer, got 1.5",
    ),
    (
        with_changes(hyperparameters={"n": {"type": "int", "minval": 1, "maxval": 4, "count": 0}}),
        "hyperparameters.n.count: must be ≥ 1",
    ),
    (
        with_changes(hyperparameters={"n": {"type": "int", "maxval": 4}}),
        "hyperparameters.n.minval: required",
    ),
    (
        with_changes(hyperparameters={"g": {"opt": {"type": "categorical", "vals": []}}}),
        "hyperparameters.g.opt.vals: must not be empty",
    ),
    (
        with_changes(hyperparameters={"lr": {"type": "log", "minval": -3, "maxval": -1, "base": 0}}),
        "hyperparameters.lr.base: must be > 0",
    ),
    (
        with_changes(hyperparameters={"lr": {"type": "float", "minval": 0, "maxval": 1}}),
        'hyperparameters.lr.type: unknown hyperparameter type "float"; expected one of const, int, double, '
        "log, categorical",
    ),
    (
        with_changes(hyperparameters={"lr": {"type": "dubble", "minval": 0, "maxval": 1}}),
        'hyperparameters.lr.type: unknown hyperparameter type "dubble"; expected one of const, int, double, '
        'log, categorical; did you mean "double"?',
    ),
    (
        with_changes(hyperparameters={"lr": {"type": "double", "min": 0, "minval": 0, "maxval": 1}}),
        'hyperparameters.lr.min: unknown field "min"; did you mean "minval"?',
    ),
    (with_changes(hyperparameters={"c": {"type": "const"}}), "hyperparameters.c.val: required"),
    (with_changes(hyperparameters={1: 2}), "hyperparameters.1: names must be strings, got 1"),
    (with_changes(hyperparameters=[1]), "hyperparameters: must be a mapping, got a list"),
    (
        with_changes(
            searcher={"name": "grid", "metric": "m"},
            hyperparameters={"g": {"lr": {"type": "log", "minval": -3, "maxval": -1}}},
        ),
        "hyperparameters.g.lr.count: required by the grid searcher",
    ),
    (with_changes(resources={"priority": 120}), "resources.priority: must be between 1 and 99, got 120"),
    (with_changes(resources={"priority": 0}), "resources.priority: must be between 1 and 99, got 0"),
    (with_changes(resources={"slots_per_trial": -1}), "resources.slots_per_trial: must be ≥ 0"),
    (
        with_changes(resources={"slots_per_trial": True}),
        "resources.slots_per_trial: must be an integer, got true",
    ),
    (
        with_changes(resources={"slots_per_trial": "2"}),
        'resources.slots_per_trial: must be an integer, got "2"',
    ),
    (with_changes(resources={"weight": 0}), "resources.weight: must be > 0"),
    (with_changes(resources={"max_slots": 0}), "resources.max_slots: must be ≥ 1"),
    (with_changes(resources={"resource_pool": ""}), "resources.resource_pool: must not be empty"),
    (
        with_changes(resources={"shm_size": "lots"}),
        'resources.shm_size: must be a memory size like "4G" or "512MiB", got "lots"',
    ),
    (
        with_changes(resources={"shm_size": 1.5}),
        'resources.shm_size: must be a number of bytes or a memory size like "4G", got 1.5',
    ),
    (
        with_changes(resources={"slot_per_trial": 2}),
        'resources.slot_per_trial: unknown field "slot_per_trial"; did you mean "slots_per_trial"?',
    ),
    (with_changes(resources=3), "resources: must be a mapping, got 3"),
    (
        with_changes(checkpoint_storage={"type": "shared_fs", "host_path": "/tmp"}),
        'checkpoint_storage.type: Stratus stores checkpoints in S3; type "shared_fs" is not supported (use "s3")',
    ),
    (with_changes(checkpoint_storage={"type": 3}), 'checkpoint_storage.type: must be "s3", got 3'),
    (
        with_changes(checkpoint_storage={"save_trial_latest": -1}),
        "checkpoint_storage.save_trial_latest: must be ≥ 0",
    ),
    (
        with_changes(environment={"environment_variables": ["A=1", "NOVALUE"]}),
        'environment.environment_variables[1]: must look like NAME=value, got "NOVALUE"',
    ),
    (
        with_changes(environment={"environment_variables": {"cuda": ["=x"]}}),
        'environment.environment_variables.cuda[0]: must look like NAME=value, got "=x"',
    ),
    (
        with_changes(environment={"environment_variables": "A=1"}),
        "environment.environment_variables: must be a list of NAME=value strings or a mapping with cpu, "
        'cuda, rocm lists, got "A=1"',
    ),
    (
        with_changes(environment={"image": {"cpu": "a", "tpu": "b"}}),
        'environment.image.tpu: unknown field "tpu"; did you mean "gpu"?',
    ),
    (
        with_changes(environment={"image": 3}),
        "environment.image: must be an image name or a mapping with cpu, cuda, rocm, got 3",
    ),
    (with_changes(min_validation_period={"epochs": -1}), "min_validation_period.epochs: must be ≥ 0"),
    (with_changes(max_restarts=-1), "max_restarts: must be ≥ 0"),
    (with_changes(max_restarts="5"), 'max_restarts: must be an integer, got "5"'),
    (with_changes(scheduling_unit=0), "scheduling_unit: must be ≥ 1"),
    (with_changes(records_per_epoch=1.5), "records_per_epoch: must be an integer, got 1.5"),
    (
        with_changes(perform_initial_validation="yes"),
        'perform_initial_validation: must be true or false, got "yes"',
    ),
    (with_changes(labels="a"), 'labels: must be a list, got "a"'),
    (with_changes(labels=["a", 1]), "labels[1]: must be a string, got 1"),
    (with_changes(name=""), "name: must not be empty"),
    (
        with_changes(reproducibility={"experiment_seed": -5}),
        "reproducibility.experiment_seed: must be between 0 and 2147483647, got -5",
    ),
    (
        with_changes(checkpoint_policy="some"),
        'checkpoint_policy: must be one of "best", "all" or "none", got "some"',
    ),
    (with_changes(data=[1]), "data: must be a mapping, got a list"),
    (with_changes(serhcer={}), 'serhcer: unknown field "serhcer"; did you mean "searcher"?'),
    (with_changes(sercher={}), 'sercher: unknown field "sercher"; did you mean "searcher"?'),
    (with_changes(zzzzzz=1), 'zzzzzz: unknown field "zzzzzz"'),
    (
        with_changes(max_length=100),
        'max_length: unknown field "max_length"; did you mean "searcher.max_length"?',
    ),
    (
        with_changes(slots_per_trial=2),
        'slots_per_trial: unknown field "slots_per_trial"; did you mean "resources.slots_per_trial"?',
    ),
]


@pytest.mark.parametrize(("raw", "expected"), ERROR_CASES, ids=[e for _, e in ERROR_CASES])
def test_error_case(raw: dict[str, Any], expected: str) -> None:
    assert problems_of(raw) == [expected]


def test_nan_and_infinity_are_rejected() -> None:
    raw = with_changes(
        hyperparameters={"lr": {"type": "double", "minval": float("nan"), "maxval": float("inf")}}
    )
    assert problems_of(raw) == [
        "hyperparameters.lr.minval: must be a finite number, got nan",
        "hyperparameters.lr.maxval: must be a finite number, got inf",
    ]


def test_top_level_must_be_a_mapping() -> None:
    assert problems_of([1, 2]) == ["<config>: must be a mapping of config fields, got a list"]


def test_every_problem_is_reported() -> None:
    raw = {
        "entrypoint": ["python3", 3],
        "sercher": {},
        "hyperparameters": {
            "lr": {"type": "double", "minval": 0.5, "maxval": 0.1},
            "opt": {"kind": {"type": "categorical", "vals": []}},
        },
        "resources": {"priority": 120, "slot_per_trial": 2},
        "checkpoint_storage": {"type": "gcs", "bucket": "b"},
        "max_restarts": -1,
    }
    assert problems_of(raw) == [
        "entrypoint[1]: must be a string, got 3",
        "hyperparameters.lr.minval: must be ≤ maxval (0.1), got 0.5",
        "hyperparameters.opt.kind.vals: must not be empty",
        "searcher: required",
        "resources.priority: must be between 1 and 99, got 120",
        'resources.slot_per_trial: unknown field "slot_per_trial"; did you mean "slots_per_trial"?',
        'checkpoint_storage.type: Stratus stores checkpoints in S3; type "gcs" is not supported (use "s3")',
        "max_restarts: must be ≥ 0",
        'sercher: unknown field "sercher"; did you mean "searcher"?',
    ]


def test_error_text_formats() -> None:
    with pytest.raises(ConfigInvalidError) as info:
        parse_experiment_config(
            {"entrypoint": "x", "searcher": {"name": "random", "metric": "m", "max_trials": 0}}
        )
    error = info.value
    assert error.problems == [ConfigProblem("searcher.max_trials", "must be ≥ 1")]
    assert str(error) == "config has 1 problem: searcher.max_trials: must be ≥ 1"
    assert error.to_dicts() == [{"path": "searcher.max_trials", "message": "must be ≥ 1"}]

    with pytest.raises(ConfigInvalidError) as info:
        parse_experiment_config({"resources": {"priority": 120}})
    error = info.value
    assert str(error) == (
        "config has 3 problems: entrypoint: required; searcher: required; "
        "resources.priority: must be between 1 and 99, got 120"
    )
    assert "\n" not in str(error)
    assert error.render() == (
        "entrypoint: required\nsearcher: required\nresources.priority: must be between 1 and 99, got 120"
    )


def test_pydantic_text_never_reaches_the_user() -> None:
    raw = {
        "entrypoint": {"a": 1},
        "searcher": {"name": "adaptive_asha", "metric": 1, "max_trials": "x", "bracket_rungs": [1.5]},
        "hyperparameters": {"x": {"type": "int", "minval": "a", "maxval": None}},
        "environment": {"ports": {"a": "b"}, "pod_spec": 3},
        "log_policies": [1],
    }
    for problem in problems_of(raw):
        for pydantic_phrase in ("Input should", "pydantic", "validation error", "type=", "[key]"):
            assert pydantic_phrase not in problem


def test_an_entrypoint_naming_the_launchers_by_their_old_module_runs_the_installed_ones():
    """Issue 28: the launchers are installed as stratus.launchers; `-m launchers.X` would run a context's
    own `launchers/` (or nothing). The config is rewritten, with a warning that says so."""
    base = {"searcher": {"name": "single", "metric": "loss", "max_length": 1}}
    parsed = parse_experiment_config(
        {**base, "entrypoint": "python3 -m launchers.torch_distributed -- train.py"}
    )
    assert parsed.config.entrypoint == "python3 -m stratus.launchers.torch_distributed -- train.py"
    assert any("installed as stratus.launchers" in w for w in parsed.warnings)
    argv = ["python3", "-m", "launchers.adaptdl", "--", "python3", "launchers.py"]
    parsed = parse_experiment_config({**base, "entrypoint": argv})
    assert parsed.config.entrypoint == [
        "python3",
        "-m",
        "stratus.launchers.adaptdl",
        "--",
        "python3",
        "launchers.py",
    ]
    unchanged = parse_experiment_config(
        {**base, "entrypoint": "python3 -m determined.launch.torch_distributed"}
    )
    assert not any("installed as" in w for w in unchanged.warnings)
