"""The sections of an experiment config other than the searcher and hyperparameters: `resources`,
`checkpoint_storage`, `environment`, `reproducibility`, Stratus' own `elastic`, and the small validated types they share with
`schema.py` (see its docstring for where Stratus differs from Determined).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Discriminator, Field, JsonValue, Tag, model_validator

from chalicelib.config._base import StrictModel, custom_error, raise_problems

__all__ = [
    "MAX_SEED",
    "CheckpointStorageConfig",
    "ElasticConfig",
    "EnvironmentConfig",
    "EnvironmentVariablesMap",
    "ImageMap",
    "NonEmptyStr",
    "ReproducibilityConfig",
    "ResourcesConfig",
    "one_of",
    "value_kind",
]

MAX_SEED = 2**31 - 1


def _between(low: int, high: int) -> AfterValidator:
    def check(value: int) -> int:
        if not low <= value <= high:
            raise custom_error(f"must be between {low} and {high}, got {value}")
        return value

    return AfterValidator(check)


def one_of(classify: Callable[[Any], str | None], message: str) -> Discriminator:
    """A discriminator picking a union member by the input's type; `message` when none fits."""
    return Discriminator(classify, custom_error_type="stratus_type", custom_error_message=message)


def value_kind(value: Any) -> str | None:
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
        raise custom_error(f'must be a memory size like "4G" or "512MiB", got "{value}"')
    return value


ShmSize = Annotated[
    Annotated[int, Field(ge=0), Tag("int")] | Annotated[str, AfterValidator(_check_shm_size), Tag("str")],
    one_of(value_kind, 'must be a number of bytes or a memory size like "4G"'),
]


class ResourcesConfig(StrictModel):
    ignored_fields = {
        "devices": "trials see the devices of the machine they run on",
        "agent_label": "removed from Determined in 0.20",
        "native_parallel": "removed from Determined",
        "slots": "Determined sizes commands and notebooks with it; a trial gets slots_per_trial",
        "shm_size": "trials use the shared memory of the machine or container they run in",
        "is_single_node": "a trial's slots are placed by the scheduler, across nodes where it needs them",
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
    slots: int | None = None

    @model_validator(mode="after")
    def _max_slots_hold_a_trial(self) -> ResourcesConfig:
        if self.max_slots is not None and self.max_slots < self.slots_per_trial:
            message = (
                f"{self.max_slots} is less than resources.slots_per_trial ({self.slots_per_trial}): no trial could ever "
                f"start; set it to {self.slots_per_trial} or more, or leave it out (no limit)"
            )
            raise_problems("ResourcesConfig", [(("max_slots",), message, self.max_slots)])
        return self


class CheckpointStorageConfig(StrictModel):
    """Where checkpoints go: always S3, the platform's bucket (a `bucket` or `prefix` given is ignored, with a
    warning); `save_*` are the retention policy applied when the experiment ends."""

    ignored_fields = {
        "endpoint_url": "checkpoints go to the platform's S3 endpoint",
        "bucket": "checkpoints go to the platform's bucket, under checkpoints/<experiment>/<trial>/<uuid>/",
        "prefix": "checkpoints go to the platform's bucket, under checkpoints/<experiment>/<trial>/<uuid>/",
    }

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

    ignored_fields = {"rocm": "Stratus runs trials on CPUs and NVIDIA GPUs only"}

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
    """Per-device variables: `cpu` on CPU slots, `cuda` and `gpu` (its older name) on GPUs."""

    ignored_fields = {"rocm": "Stratus runs trials on CPUs and NVIDIA GPUs only"}

    cpu: list[EnvVar] = []
    cuda: list[EnvVar] = []
    gpu: list[EnvVar] = []
    rocm: list[EnvVar] = []


Image = Annotated[
    Annotated[NonEmptyStr, Tag("str")] | Annotated[ImageMap, Tag("map")],
    one_of(value_kind, "must be an image name or a mapping with cpu, cuda, rocm"),
]
EnvironmentVariables = Annotated[
    Annotated[list[EnvVar], Tag("list")] | Annotated[EnvironmentVariablesMap, Tag("map")],
    one_of(value_kind, "must be a list of NAME=value strings or a mapping with cpu, cuda, rocm lists"),
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


# Kubernetes-style quantities (NNI's `storageSize`): "1Gi" (binary), "500M" (decimal), "2048" bytes.
_QUANTITY = re.compile(r"^(\d+(?:\.\d+)?) ?(?:([kKMGTP])(i?))?[bB]?$")
_QUANTITY_POWERS = {"k": 1, "K": 1, "M": 2, "G": 3, "T": 4, "P": 5}


def quantity_bytes(value: int | str) -> int:
    """Bytes of a size: a number of bytes, or "1Gi" (2**30), "500M" (5 * 10**8), "64KiB", "10GB"."""
    if isinstance(value, int):
        return value
    match = _QUANTITY.match(value)
    if match is None:
        raise ValueError(f"not a size: {value!r}")
    number, unit, binary = match.groups()
    power = _QUANTITY_POWERS[unit] if unit else 0
    return int(float(number) * (1024 if binary else 1000) ** power)


def _check_quantity(value: str) -> str:
    if not _QUANTITY.match(value):
        raise custom_error(f'must be a size like "1Gi" or "500M" (or a number of bytes), got "{value}"')
    return value


Quantity = Annotated[
    Annotated[int, Field(ge=1), Tag("int")] | Annotated[str, AfterValidator(_check_quantity), Tag("str")],
    one_of(value_kind, 'must be a size like "1Gi" or a number of bytes'),
]

#: `elastic.max_replicas` unset, on a pool whose size is unknown.
DEFAULT_MAX_REPLICAS = 4
#: `elastic.max_replicas` unset: at most this many replicas, however large the pool.
MAX_REPLICAS_CAP = 16


class ElasticConfig(StrictModel):
    """An elastic trial (NNI's `adl` training service): its workers run under `stratus.launchers.adaptdl` as
    `min_replicas` to `max_replicas` replicas of `slots_per_replica` slots each; it starts (and, until the
    elastic allocator resizes it, stays) at `min_replicas`, so `resources.slots_per_trial` is
    `min_replicas * slots_per_replica`.

    - `max_replicas` None: as many as the trial's pool can hold (`replica_limit`), capped at
      `MAX_REPLICAS_CAP`; `DEFAULT_MAX_REPLICAS` where the pool's size is unknown.
    - `min_rescale_interval_s`: no rescale sooner than this after the trial's last (re)start, so that a
      restart pays off; `speedup_threshold`: grow only when the estimated speedup gains at least this
      factor.
    - `checkpoint_size_limit`: a soft limit on AdaptDL's checkpoint folder (NNI's `checkpoint.storageSize`),
      kept but not enforced yet: parsing warns that it is ignored.
    """

    ignored_fields = {
        "checkpoint_size_limit": "not enforced: AdaptDL's checkpoint folder is stored whatever its size",
    }

    framework: Literal["adaptdl"] = "adaptdl"
    min_replicas: int = Field(default=1, ge=1)
    max_replicas: int | None = Field(default=None, ge=1)
    slots_per_replica: int = Field(default=1, ge=1)
    min_rescale_interval_s: int = Field(default=300, ge=0)
    speedup_threshold: float = Field(default=1.05, ge=1)
    checkpoint_size_limit: Quantity | None = None

    @model_validator(mode="after")
    def _max_at_least_min(self) -> ElasticConfig:
        if self.max_replicas is not None and self.max_replicas < self.min_replicas:
            message = f"must be ≥ min_replicas ({self.min_replicas}), got {self.max_replicas}"
            raise_problems("elastic", [(("max_replicas",), message, self.max_replicas)])
        return self

    @property
    def start_slots(self) -> int:
        """The slots the trial starts with: `min_replicas * slots_per_replica`."""
        return self.min_replicas * self.slots_per_replica

    def replica_limit(self, pool_max_slots: int | None) -> int:
        """The most replicas the trial may grow to in a pool of at most `pool_max_slots` slots (None:
        unknown): `max_replicas` when set, else what the pool holds, capped; never below `min_replicas`."""
        if self.max_replicas is not None:
            return self.max_replicas
        if pool_max_slots is None:
            return max(self.min_replicas, DEFAULT_MAX_REPLICAS)
        return max(self.min_replicas, min(pool_max_slots // self.slots_per_replica, MAX_REPLICAS_CAP))

    @property
    def checkpoint_size_limit_bytes(self) -> int | None:
        limit = self.checkpoint_size_limit
        return None if limit is None else quantity_bytes(limit)
