"""Helpers the control plane uses: lengths, hyperparameter space, entrypoint argv, warnings, defaults."""

from __future__ import annotations

from typing import Any

import pytest

from chalicelib.config import (
    CategoricalHP,
    ConstHP,
    DoubleHP,
    ExperimentConfig,
    IntHP,
    Length,
    LogHP,
    PositiveLength,
    entrypoint_argv,
    flatten_hyperparameters,
    parse_experiment_config,
    unflatten_hyperparameters,
)


def config_of(**changes: Any) -> ExperimentConfig:
    raw: dict[str, Any] = {"entrypoint": "python3 train.py", "searcher": {"name": "single", "metric": "loss"}}
    raw.update(changes)
    return parse_experiment_config(raw).config


# -- lengths --------------------------------------------------------------------------------------


def test_length_forms() -> None:
    assert Length.model_validate(10) == Length(batches=10)
    assert Length.model_validate({"records": 5}).unit == "records"
    assert Length.of("epochs", 3).value == 3
    assert Length(epochs=2) == PositiveLength(epochs=2)
    assert Length(epochs=2) != Length(batches=2)
    assert Length(batches=3).model_dump() == {"batches": 3}
    assert hash(Length(batches=3)) == hash(PositiveLength(batches=3))


@pytest.mark.parametrize(
    ("length", "records_per_epoch", "global_batch_size", "expected"),
    [
        (Length(batches=7), None, None, 7),
        (Length(records=640), None, 64, 10),
        (Length(records=650), None, 64, 10),
        (Length(records=640), None, None, None),
        (Length(epochs=2), 6400, 64, 200),
        (Length(epochs=2), None, 64, None),
        (Length(epochs=2), 6400, None, None),
    ],
)
def test_length_to_batches(
    length: Length, records_per_epoch: int | None, global_batch_size: int | None, expected: int | None
) -> None:
    assert (
        length.to_batches(records_per_epoch=records_per_epoch, global_batch_size=global_batch_size)
        == expected
    )


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({}, None),  # no max_length: the trial decides
        ({"searcher": {"name": "single", "metric": "m", "max_length": 300}}, (300, "batches")),
        (  # converts: batches
            {
                "searcher": {"name": "single", "metric": "m", "max_length": {"epochs": 2}},
                "records_per_epoch": 1000,
                "hyperparameters": {"global_batch_size": 100},
            },
            (20, "batches"),
        ),
        (  # no records_per_epoch: the trial measures epochs, as in Determined
            {
                "searcher": {
                    "name": "adaptive_asha",
                    "metric": "m",
                    "max_trials": 4,
                    "max_length": {"epochs": 9},
                },
                "hyperparameters": {"global_batch_size": 100},
            },
            (9, "epochs"),
        ),
        (  # no constant global_batch_size: records measured by the trial
            {
                "searcher": {
                    "name": "adaptive_asha",
                    "metric": "m",
                    "max_trials": 4,
                    "max_length": {"records": 5000},
                }
            },
            (5000, "records"),
        ),
        (
            {
                "searcher": {
                    "name": "adaptive_asha",
                    "metric": "m",
                    "max_trials": 4,
                    "time_metric": "samples",
                    "max_time": 64,
                }
            },
            (64, "samples"),
        ),
    ],
)
def test_searcher_length_is_batches_where_it_converts_else_the_unit_the_trial_measures(
    changes: dict[str, Any], expected: tuple[int, str] | None
) -> None:
    length = config_of(**changes).searcher_length()

    assert (None if length is None else (length.value, length.unit)) == expected


def test_resources_slots_is_accepted_with_a_warning() -> None:
    parsed = parse_experiment_config(
        {"entrypoint": "x", "searcher": {"name": "single", "metric": "m"}, "resources": {"slots": 4}}
    )

    assert parsed.config.resources.slots == 4 and parsed.config.resources.slots_per_trial == 1
    assert parsed.warnings == [
        "resources.slots: ignored by Stratus (Determined sizes commands and notebooks with it; a trial gets "
        "slots_per_trial)"
    ]


def test_searcher_max_length_batches() -> None:
    searcher = {"name": "single", "metric": "m", "max_length": {"epochs": 2}}
    config = config_of(searcher=searcher, records_per_epoch=1000, hyperparameters={"global_batch_size": 100})
    assert config.global_batch_size == 100
    assert config.searcher_max_length_batches() == 20
    assert config.searcher_max_length_batches(records_per_epoch=500) == 10
    assert config.searcher_max_length_batches(global_batch_size=10) == 200
    assert config_of(searcher=searcher).searcher_max_length_batches() is None
    assert config_of().searcher_max_length_batches() is None
    batches = {"name": "single", "metric": "m", "max_length": 300}
    assert config_of(searcher=batches).searcher_max_length_batches() == 300


def test_global_batch_size_only_when_constant() -> None:
    assert (
        config_of(hyperparameters={"global_batch_size": {"type": "const", "val": 32}}).global_batch_size == 32
    )
    ranged = {"global_batch_size": {"type": "int", "minval": 16, "maxval": 64}}
    assert config_of(hyperparameters=ranged).global_batch_size is None
    assert config_of(hyperparameters={"global_batch_size": True}).global_batch_size is None
    assert config_of().global_batch_size is None


# -- hyperparameter space -------------------------------------------------------------------------


def test_flatten_and_unflatten() -> None:
    config = config_of(
        hyperparameters={
            "lr": {"type": "log", "minval": -4, "maxval": -1},
            "opt": {
                "name": "sgd",
                "momentum": {"type": "double", "minval": 0, "maxval": 1},
                "inner": {"k": 3},
            },
            "layers": {"type": "int", "minval": 1, "maxval": 3, "count": 3},
            "act": {"type": "categorical", "vals": ["relu", "gelu"]},
        }
    )
    space = config.hyperparameter_space()
    assert space == flatten_hyperparameters(config.hyperparameters)
    assert list(space) == [
        ("lr",),
        ("opt", "name"),
        ("opt", "momentum"),
        ("opt", "inner", "k"),
        ("layers",),
        ("act",),
    ]
    assert space[("lr",)] == LogHP(minval=-4, maxval=-1)
    assert space[("opt", "name")] == ConstHP(val="sgd")
    assert space[("opt", "momentum")] == DoubleHP(minval=0, maxval=1)
    assert space[("layers",)] == IntHP(minval=1, maxval=3, count=3)
    assert space[("act",)] == CategoricalHP(vals=["relu", "gelu"])
    values = {path: f"v{i}" for i, path in enumerate(space)}
    assert unflatten_hyperparameters(values) == {
        "lr": "v0",
        "opt": {"name": "v1", "momentum": "v2", "inner": {"k": "v3"}},
        "layers": "v4",
        "act": "v5",
    }


def test_unflatten_rejects_conflicts() -> None:
    with pytest.raises(ValueError):
        unflatten_hyperparameters({("a",): 1, ("a", "b"): 2})
    with pytest.raises(ValueError):
        unflatten_hyperparameters({(): 1})


def test_dump_is_the_json_space_searchers_sample_from() -> None:
    config = config_of(hyperparameters={"lr": {"type": "log", "minval": -4, "maxval": -1}, "g": {"bs": 32}})
    assert config.model_dump(mode="json")["hyperparameters"] == {
        "lr": {"type": "log", "base": 10.0, "minval": -4.0, "maxval": -1.0, "count": None},
        "g": {"bs": {"type": "const", "val": 32}},
    }


# -- entrypoint -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entrypoint", "argv"),
    [
        ("python3 train.py --lr 0.1", ["python3", "train.py", "--lr", "0.1"]),
        ('python3 train.py --name "my run"', ["python3", "train.py", "--name", "my run"]),
        ("python3 -m stratus.launchers.torch_distributed --trial model_def:Trial", None),
        ("model_def:MNistTrial", ["model_def:MNistTrial"]),
        ("python3 train.py --opt=adam", ["python3", "train.py", "--opt=adam"]),
        ("cd src && python3 train.py", ["sh", "-c", "cd src && python3 train.py"]),
        ("python3 train.py | tee log.txt", ["sh", "-c", "python3 train.py | tee log.txt"]),
        ("python3 train.py > out.log", ["sh", "-c", "python3 train.py > out.log"]),
        ("python3 train.py --data $DATA_DIR", ["sh", "-c", "python3 train.py --data $DATA_DIR"]),
        ("python3 train.py; echo done", ["sh", "-c", "python3 train.py; echo done"]),
        ("python3 *.py", ["sh", "-c", "python3 *.py"]),
        ("FOO=1 python3 train.py", ["sh", "-c", "FOO=1 python3 train.py"]),
        ("python3 ~/train.py", ["sh", "-c", "python3 ~/train.py"]),
        ("python3 train.py 'unbalanced", ["sh", "-c", "python3 train.py 'unbalanced"]),
        (["python3", "train.py", "a b"], ["python3", "train.py", "a b"]),
        (["sh", "-c", "x && y"], ["sh", "-c", "x && y"]),
    ],
)
def test_entrypoint_argv(entrypoint: str | list[str], argv: list[str] | None) -> None:
    expected = argv if argv is not None else entrypoint.split()  # type: ignore[union-attr]
    assert entrypoint_argv(entrypoint) == expected
    assert entrypoint_argv(config_of(entrypoint=entrypoint)) == expected


# -- warnings, secrets, service defaults ----------------------------------------------------------


def test_ignored_fields_warn() -> None:
    parsed = parse_experiment_config(
        {
            "entrypoint": "x",
            "searcher": {"name": "single", "metric": "m"},
            "bind_mounts": [{"host_path": "/data", "container_path": "/data"}],
            "optimizations": {"aggregation_frequency": 2},
            "profiling": {"enabled": True},
            "environment": {"force_pull_image": True, "pod_spec": {"spec": {}}},
            "resources": {"devices": ["/dev/fuse"]},
            "checkpoint_storage": {"endpoint_url": "http://minio:9000"},
        }
    )
    assert parsed.warnings == [
        "resources.devices: ignored by Stratus (trials see the devices of the machine they run on)",
        "checkpoint_storage.endpoint_url: ignored by Stratus (checkpoints go to the platform's S3 endpoint)",
        "environment.force_pull_image: ignored by Stratus (images are pulled by the compute backend)",
        "environment.pod_spec: ignored by Stratus (Stratus does not run on Kubernetes)",
        "bind_mounts: ignored by Stratus (trials run without host bind mounts)",
        "optimizations: ignored by Stratus (Determined's trial-API optimizations do not apply)",
        "profiling: ignored by Stratus (Determined's profiler is not available)",
    ]
    # The values are kept, and defaults do not warn when the dumped config is read again.
    assert parsed.config.bind_mounts == [{"host_path": "/data", "container_path": "/data"}]
    assert parse_experiment_config(config_of().model_dump(mode="json")).warnings == []


def test_credentials_are_dropped_with_a_warning() -> None:
    parsed = parse_experiment_config(
        {
            "entrypoint": "x",
            "searcher": {"name": "single", "metric": "m"},
            "checkpoint_storage": {"type": "s3", "bucket": "b", "access_key": "AKIA", "secret_key": "shh"},
            "environment": {"registry_auth": {"username": "u", "password": "p"}},
        }
    )
    assert parsed.warnings == [
        "checkpoint_storage.access_key: ignored and not stored (trials reach S3 with the platform's IAM role)",
        "checkpoint_storage.secret_key: ignored and not stored (trials reach S3 with the platform's IAM role)",
        "environment.registry_auth: ignored and not stored (images are pulled with the backend's credentials)",
        "checkpoint_storage.bucket: ignored by Stratus (checkpoints go to the platform's bucket, under "
        "checkpoints/<experiment>/<trial>/<uuid>/)",
    ]
    dumped = str(parsed.config.model_dump(mode="json"))
    assert "AKIA" not in dumped and "shh" not in dumped and "password" not in dumped


def test_with_service_defaults() -> None:
    filled = config_of().with_service_defaults(experiment_id=17, experiment_seed=99)
    assert filled.name == "Experiment 17"
    assert filled.reproducibility.experiment_seed == 99
    kept = config_of(name="mine", reproducibility={"experiment_seed": 5})
    assert kept.with_service_defaults(experiment_id=17, experiment_seed=99) == kept
    big_seed = config_of().with_service_defaults(experiment_id=1, experiment_seed=2**40 + 3)
    assert big_seed.reproducibility.experiment_seed == 3
    assert parse_experiment_config(filled.model_dump(mode="json")).config == filled


def test_environment_variables_by_device() -> None:
    config = config_of(
        environment={
            "image": "repo/img:1",
            "environment_variables": {"cpu": ["A=cpu"], "cuda": ["A=cuda", "B=2"], "gpu": ["C=3"]},
        }
    )
    env = config.environment
    assert env.image_for(gpu=True) == env.image_for(gpu=False) == "repo/img:1"
    assert env.variables_for(gpu=False) == {"A": "cpu"}
    assert env.variables_for(gpu=True) == {"C": "3", "A": "cuda", "B": "2"}
    assert config_of().environment.image_for(gpu=True) is None


def test_configs_are_immutable() -> None:
    config = config_of()
    with pytest.raises(ValueError):
        config.max_restarts = 3  # type: ignore[misc]


def test_package_imports_only_pydantic_yaml_and_the_standard_library() -> None:
    import importlib
    import inspect
    import sys

    allowed = {"pydantic", "pydantic_core", "yaml", "typing_extensions", "annotated_types"}
    for name in ("__init__", "_base", "errors", "hyperparameters", "searcher", "schema", "load"):
        module = importlib.import_module(
            "chalicelib.config" if name == "__init__" else f"chalicelib.config.{name}"
        )
        for value in vars(module).values():
            origin = value.__name__ if inspect.ismodule(value) else getattr(value, "__module__", None)
            if not isinstance(origin, str):
                continue
            root = origin.split(".")[0]
            # chalicelib.errors imports nothing of the project: the config's errors join its one tree.
            assert (
                origin.startswith(("chalicelib.config", "chalicelib.errors"))
                or root in allowed
                or root in sys.stdlib_module_names
            ), f"chalicelib.config.{name} uses {origin}"


def test_json_schema_can_be_generated_for_openapi() -> None:
    for mode in ("validation", "serialization"):
        schema = ExperimentConfig.model_json_schema(mode=mode)
        assert {"entrypoint", "searcher"} <= set(schema["required"])
