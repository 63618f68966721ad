"""`ExperimentConfig`: Determined's experiment config, with Determined's field names and defaults.

Decisions where Stratus differs from, or had to choose within, Determined's behaviour:

- `name` defaults to None; the service fills it (`with_service_defaults`: "Experiment <id>").
- `reproducibility.experiment_seed` defaults to None; the service fills it at submission, as
  Determined derives it from the submission time.
- `checkpoint_storage` is S3 only (`type` defaults to `s3`; `bucket` None = the platform's bucket).
  Credentials in the config are never stored (see `load.py`).
- `resources.resource_pool` defaults to "default"; `resources.priority` to 42 (1-99, lower number =
  higher priority, as Determined's priority scheduler).
- Fields that only make sense on a Determined cluster (bind mounts, pod specs, profiling, ...) are
  accepted and kept, and parsing warns that they are ignored.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Sequence
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Discriminator, Field, JsonValue, Tag, model_validator

from chalicelib.config._base import (
    Length,
    StrictModel,
    custom_error,
    raise_problems,
)
from chalicelib.config.hyperparameters import (
    ConstHP,
    HPGroup,
    HyperparameterLeaf,
    HyperparameterValue,
    IntHP,
    flatten_hyperparameters,
    leaf_locations,
)
from chalicelib.config.searcher import GridSearcher, SearcherConfig

__all__ = [
    "CheckpointStorageConfig",
    "EnvironmentConfig",
    "EnvironmentVariablesMap",
    "ExperimentConfig",
    "ImageMap",
    "ReproducibilityConfig",
    "ResourcesConfig",
    "entrypoint_argv",
]

MAX_SEED = 2**31 - 1


def _between(low: int, high: int) -> AfterValidator:
    def check(value: int) -> int:
        if not low <= value <= high:
            raise custom_error(f"must be between {low} and {high}, got {value}")
        return value

    return AfterValidator(check)


def _one_of(classify: Callable[[Any], str | None], message: str) -> Discriminator:
    """A discriminator picking a union member by the input's type; `message` when none fits."""
    return Discriminator(classify, custom_error_type="stratus_type", custom_error_message=message)


def _kind(value: Any) -> str | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        return "str"
    if isinstance(value, int):
        return "int"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict | StrictModel):
        return "map"
    return None


NonEmptyStr = Annotated[str, Field(min_length=1)]

_SHM_SIZE = re.compile(r"^([0-9]*[.])?[0-9]+ ?(([kmgtpKMGTP]([iI]?[bB])?)|[bB])?$")


def _check_shm_size(value: str) -> str:
    if not _SHM_SIZE.match(value):
        raise custom_error(f'must be a memory size like "4G" or "512Mi", got "{value}"')
    return value


ShmSize = Annotated[
    Annotated[int, Field(ge=0), Tag("int")] | Annotated[str, AfterValidator(_check_shm_size), Tag("str")],
    _one_of(_kind, 'must be a number of bytes or a memory size like "4G"'),
]


class ResourcesConfig(StrictModel):
    ignored_fields = {
        "devices": "trials see the devices of the machine they run on",
        "agent_label": "removed from Determined in 0.20",
        "native_parallel": "removed from Determined",
    }

    slots_per_trial: int = Field(default=1, ge=0)
    resource_pool: NonEmptyStr = "default"
    priority: Annotated[int, _between(1, 99)] = 42
    weight: float = Field(default=1.0, gt=0)
    max_slots: int | None = Field(default=None, ge=1)
    shm_size: ShmSize | None = None
    is_single_node: bool = False
    devices: list[JsonValue] = []
    agent_label: str | None = None
    native_parallel: bool = False


class CheckpointStorageConfig(StrictModel):
    """Where checkpoints go: always S3. `bucket` None means the platform's bucket."""

    ignored_fields = {"endpoint_url": "checkpoints go to the platform's S3 endpoint"}

    type: Literal["s3"] = "s3"
    bucket: NonEmptyStr | None = None
    prefix: str | None = None
    endpoint_url: str | None = None
    save_experiment_best: int = Field(default=0, ge=0)
    save_trial_best: int = Field(default=1, ge=0)
    save_trial_latest: int = Field(default=1, ge=0)

    @model_validator(mode="before")
    @classmethod
    def _s3_only(cls, data: Any) -> Any:
        if isinstance(data, dict):
            kind = data.get("type")
            if isinstance(kind, str) and kind != "s3":
                message = f'Stratus stores checkpoints in S3; type "{kind}" is not supported (use "s3")'
                raise_problems("checkpoint_storage", [(("type",), message, kind)])
        return data


class ImageMap(StrictModel):
    """Per-device images; `gpu` is Determined's older name for `cuda`."""

    cpu: NonEmptyStr | None = None
    cuda: NonEmptyStr | None = None
    gpu: NonEmptyStr | None = None
    rocm: NonEmptyStr | None = None


def _check_env_var(value: str) -> str:
    name, sep, _ = value.partition("=")
    if not sep or not name:
        raise custom_error(f'must look like NAME=value, got "{value}"')
    return value


EnvVar = Annotated[str, AfterValidator(_check_env_var)]


class EnvironmentVariablesMap(StrictModel):
    cpu: list[EnvVar] = []
    cuda: list[EnvVar] = []
    gpu: list[EnvVar] = []
    rocm: list[EnvVar] = []


Image = Annotated[
    Annotated[NonEmptyStr, Tag("str")] | Annotated[ImageMap, Tag("map")],
    _one_of(_kind, "must be an image name or a mapping with cpu, cuda, rocm"),
]
EnvironmentVariables = Annotated[
    Annotated[list[EnvVar], Tag("list")] | Annotated[EnvironmentVariablesMap, Tag("map")],
    _one_of(_kind, "must be a list of NAME=value strings or a mapping with cpu, cuda, rocm lists"),
]


class EnvironmentConfig(StrictModel):
    ignored_fields = {
        "force_pull_image": "images are pulled by the compute backend",
        "ports": "trials expose no ports",
        "pod_spec": "Stratus does not run on Kubernetes",
        "add_capabilities": "containers run with the backend's capabilities",
        "drop_capabilities": "containers run with the backend's capabilities",
        "proxy_ports": "trials expose no ports",
    }

    image: Image | None = None
    environment_variables: EnvironmentVariables = []
    force_pull_image: bool = False
    ports: dict[str, int] = {}
    pod_spec: dict[str, JsonValue] | None = None
    add_capabilities: list[str] = []
    drop_capabilities: list[str] = []
    proxy_ports: list[dict[str, JsonValue]] = []

    def image_for(self, *, gpu: bool) -> str | None:
        """The image for a trial on GPUs (`gpu=True`) or CPUs, or None for the backend's default."""
        if self.image is None or isinstance(self.image, str):
            return self.image
        return (self.image.cuda or self.image.gpu) if gpu else self.image.cpu

    def variables_for(self, *, gpu: bool) -> dict[str, str]:
        """The configured environment variables as a mapping (later entries win)."""
        entries: list[str]
        if isinstance(self.environment_variables, list):
            entries = self.environment_variables
        elif gpu:
            entries = [*self.environment_variables.gpu, *self.environment_variables.cuda]
        else:
            entries = self.environment_variables.cpu
        variables: dict[str, str] = {}
        for entry in entries:
            name, _, value = entry.partition("=")
            variables[name] = value
        return variables


class ReproducibilityConfig(StrictModel):
    """`experiment_seed` None means: filled by the service at submission."""

    experiment_seed: Annotated[int, _between(0, MAX_SEED)] | None = None


Entrypoint = Annotated[
    Annotated[NonEmptyStr, Tag("str")] | Annotated[list[NonEmptyStr], Field(min_length=1), Tag("list")],
    _one_of(_kind, "must be a command string or a list of strings"),
]

_CLUSTER_ONLY = "only meaningful on a Determined cluster"

# HyperparameterValue names HPGroup as a forward reference, which pydantic resolves in the
# namespace of the model using it: this module.
_FORWARD_REFERENCES = (HPGroup,)


class ExperimentConfig(StrictModel):
    """A validated experiment config; `model_dump(mode="json")` gives it back with defaults filled."""

    ignored_fields = {
        "bind_mounts": "trials run without host bind mounts",
        "optimizations": "Determined's trial-API optimizations do not apply",
        "profiling": "Determined's profiler is not available",
        "tensorboard_storage": "deprecated in Determined",
        "data_layer": "deprecated in Determined",
        "slurm": _CLUSTER_ONLY,
        "pbs": _CLUSTER_ONLY,
        "integrations": _CLUSTER_ONLY,
    }

    name: NonEmptyStr | None = None
    description: str | None = None
    labels: list[str] = []
    workspace: str | None = None
    project: str | None = None
    entrypoint: Entrypoint
    hyperparameters: dict[str, HyperparameterValue] = {}
    searcher: SearcherConfig
    resources: ResourcesConfig = ResourcesConfig()
    checkpoint_storage: CheckpointStorageConfig = CheckpointStorageConfig()
    checkpoint_policy: Literal["best", "all", "none"] = "best"
    min_validation_period: Length = Length(batches=0)
    min_checkpoint_period: Length = Length(batches=0)
    max_restarts: int = Field(default=5, ge=0)
    scheduling_unit: int = Field(default=100, ge=1)
    records_per_epoch: int = Field(default=0, ge=0)
    perform_initial_validation: bool = False
    environment: EnvironmentConfig = EnvironmentConfig()
    reproducibility: ReproducibilityConfig = ReproducibilityConfig()
    preemption_timeout: int = Field(default=3600, ge=0)
    data: dict[str, JsonValue] = {}
    debug: bool = False
    log_policies: list[dict[str, JsonValue]] = []
    bind_mounts: list[JsonValue] = []
    optimizations: dict[str, JsonValue] = {}
    profiling: dict[str, JsonValue] = {}
    tensorboard_storage: dict[str, JsonValue] | None = None
    data_layer: dict[str, JsonValue] | None = None
    slurm: dict[str, JsonValue] = {}
    pbs: dict[str, JsonValue] = {}
    integrations: dict[str, JsonValue] | None = None

    @model_validator(mode="after")
    def _grid_needs_counts(self) -> ExperimentConfig:
        if isinstance(self.searcher, GridSearcher):
            raise_problems(
                "ExperimentConfig",
                [
                    ((*loc, "count"), "required by the grid searcher", None)
                    for loc, leaf in leaf_locations(self.hyperparameters)
                    if leaf.type in ("int", "double", "log") and getattr(leaf, "count", None) is None
                ],
            )
        return self

    # -- accessors for the control plane -------------------------------------------------------

    def hyperparameter_space(self) -> dict[tuple[str, ...], HyperparameterLeaf]:
        """Every hyperparameter leaf keyed by its path of names (nested groups flattened)."""
        return flatten_hyperparameters(self.hyperparameters)

    @property
    def global_batch_size(self) -> int | None:
        """The `global_batch_size` hyperparameter when it is a constant integer."""
        spec = self.hyperparameters.get("global_batch_size")
        if isinstance(spec, ConstHP) and isinstance(spec.val, int) and not isinstance(spec.val, bool):
            return spec.val
        if isinstance(spec, IntHP) and spec.minval == spec.maxval:
            return spec.minval
        return None

    def searcher_max_length_batches(
        self, records_per_epoch: int | None = None, global_batch_size: int | None = None
    ) -> int | None:
        """The searcher's `max_length` in batches, or None.

        None when the searcher sets no `max_length` (the trial decides; or adaptive_asha's
        `time_metric` form) or when converting records/epochs needs a number that is unknown.
        Defaults: this config's `records_per_epoch` (when > 0) and constant `global_batch_size`.
        """
        length = self.searcher.max_length
        if length is None:
            return None
        return length.to_batches(
            records_per_epoch=records_per_epoch or self.records_per_epoch or None,
            global_batch_size=global_batch_size or self.global_batch_size,
        )

    def with_service_defaults(self, *, experiment_id: int, experiment_seed: int) -> ExperimentConfig:
        """A copy with the values the service fills at submission: the name and the seed.

        Values the user gave are kept.
        """
        update: dict[str, Any] = {}
        if self.name is None:
            update["name"] = f"Experiment {experiment_id}"
        if self.reproducibility.experiment_seed is None:
            update["reproducibility"] = ReproducibilityConfig(
                experiment_seed=experiment_seed % (MAX_SEED + 1)
            )
        return self.model_copy(update=update) if update else self


_SHELL_SYNTAX = re.compile(r"[|&;<>()$`*?\[~#\n{}]|^\s*[A-Za-z_][A-Za-z0-9_]*=")


def entrypoint_argv(entrypoint: ExperimentConfig | str | Sequence[str]) -> list[str]:
    """The argv that runs an entrypoint (a config, or its `entrypoint` value).

    - a list is already argv, used as is;
    - a string is a shell command, as in Determined: when it uses shell syntax (pipes, `&&`, `;`,
      redirections, `$VAR`, globs, `~`, comments, a leading `NAME=value`) it runs as
      `["sh", "-c", command]`; otherwise it is split into words with `shlex.split` (same result,
      one process less). A string `shlex` cannot split (unbalanced quotes) also goes to `sh -c`,
      which reports the error in the trial's log.
    """
    value = entrypoint.entrypoint if isinstance(entrypoint, ExperimentConfig) else entrypoint
    if not isinstance(value, str):
        return list(value)
    if _SHELL_SYNTAX.search(value):
        return ["sh", "-c", value]
    try:
        words = shlex.split(value)
    except ValueError:
        return ["sh", "-c", value]
    return words if words else ["sh", "-c", value]
