"""`ExperimentConfig`: Determined's experiment config, with Determined's field names and defaults.

Decisions where Stratus differs from, or had to choose within, Determined's behaviour:

- `name` defaults to None; the service fills it (`with_service_defaults`: "Experiment <id>").
- `reproducibility.experiment_seed` defaults to None; the service fills it at submission, as
  Determined derives it from the submission time.
- `checkpoint_storage` is S3 only (`type` defaults to `s3`), the platform's bucket (`bucket` and `prefix`
  are warned about and ignored).
  Credentials in the config are never stored (see `load.py`).
- `resources.resource_pool` defaults to "default"; `resources.priority` to 42 (1-99, lower number =
  higher priority, as Determined's priority scheduler).
- `elastic` (Stratus' own, not Determined's; NNI's `adl` configs translate to it): an elastic trial run by
  `stratus.launchers.adaptdl`. It starts at `elastic.min_replicas * elastic.slots_per_replica` slots, which
  `resources.slots_per_trial` defaults to and, when given, must equal.
- Fields that only make sense on a Determined cluster (bind mounts, pod specs, profiling, ...) are
  accepted and kept, and parsing warns that they are ignored.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import Field, JsonValue, Tag, model_validator

from chalicelib.config._base import Length, StrictModel, raise_problems
from chalicelib.config.hyperparameters import (
    ConstHP,
    HPGroup,
    HyperparameterLeaf,
    HyperparameterValue,
    IntHP,
    flatten_hyperparameters,
    leaf_locations,
)
from chalicelib.config.searcher import AdaptiveASHASearcher, GridSearcher, PBTSearcher, SearcherConfig
from chalicelib.config.sections import (
    MAX_SEED,
    CheckpointStorageConfig,
    ElasticConfig,
    EnvironmentConfig,
    NonEmptyStr,
    ReproducibilityConfig,
    ResourcesConfig,
    one_of,
    value_kind,
)

# The sections' own types are `sections`'s to export (the package's `__init__` takes them from there).
__all__ = ["ExperimentConfig", "SearcherLength", "entrypoint_argv"]


@dataclass(frozen=True)
class SearcherLength:
    """A searcher's length budget per trial: `value` in `unit` (batches, records, epochs, or the name of
    adaptive_asha's `time_metric`)."""

    value: int
    unit: str


Entrypoint = Annotated[
    Annotated[NonEmptyStr, Tag("str")] | Annotated[list[NonEmptyStr], Field(min_length=1), Tag("list")],
    one_of(value_kind, "must be a command string or a list of strings"),
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
        "workspace": "Stratus has no workspaces or projects; labels group experiments",
        "project": "Stratus has no workspaces or projects; labels group experiments",
        "checkpoint_policy": "PyTorchTrial checkpoints at min_checkpoint_period, when told to stop and at "
        "its end",
        "preemption_timeout": "a trial told to stop is not killed after a deadline; it stops at its next "
        "should_preempt() check",
        "debug": "Determined's debug logging has no Stratus equivalent",
        "log_policies": "trial logs are not matched against patterns; a failed trial restarts up to "
        "max_restarts",
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
    elastic: ElasticConfig | None = None

    @model_validator(mode="before")
    @classmethod
    def _elastic_trial_slots(cls, data: Any) -> Any:
        """An elastic trial's `resources.slots_per_trial` defaults to the slots it starts with."""
        elastic = data.get("elastic") if isinstance(data, dict) else None
        resources = data.get("resources") if isinstance(data, dict) else None
        if not isinstance(elastic, dict) or not isinstance(resources, dict | None):
            return data
        replicas, per_replica = elastic.get("min_replicas", 1), elastic.get("slots_per_replica", 1)
        if (resources or {}).get("slots_per_trial") is None and _positive_ints(replicas, per_replica):
            return {**data, "resources": {**(resources or {}), "slots_per_trial": replicas * per_replica}}
        return data

    @model_validator(mode="after")
    def _elastic_slots_match(self) -> ExperimentConfig:
        if self.elastic is not None and self.resources.slots_per_trial != self.elastic.start_slots:
            start = self.elastic.start_slots
            message = (
                f"an elastic trial starts at elastic.min_replicas × elastic.slots_per_replica = {start} slots; "
                f"set slots_per_trial to {start} or leave it out"
            )
            raise_problems("ExperimentConfig", [(("resources", "slots_per_trial"), message, None)])
        return self

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

    def searcher_length(self) -> SearcherLength | None:
        """The searcher's length budget per trial and the unit the trial measures it in, or None.

        - adaptive_asha's `time_metric` + `max_time`: `max_time` in that metric;
        - `max_length` that converts into batches (see `searcher_max_length_batches`): batches;
        - `max_length` in records or epochs that does not convert (no `records_per_epoch`, or no
          constant `global_batch_size`): the value in its own unit, measured by the trial, as in
          Determined (its trials get the searcher's lengths in the configured unit; PyTorchTrial counts
          epochs by its training data loader);
        - no `max_length`: None (the trial decides).

        pbt's length is one round's, `length_per_round`, by the same rules as `max_length`.
        """
        searcher = self.searcher
        if isinstance(searcher, AdaptiveASHASearcher) and searcher.time_metric is not None:
            assert searcher.max_time is not None  # validated together
            return SearcherLength(searcher.max_time, searcher.time_metric)
        if isinstance(searcher, PBTSearcher):
            per_round = searcher.length_per_round
            batches = per_round.to_batches(
                records_per_epoch=self.records_per_epoch or None, global_batch_size=self.global_batch_size
            )
            return SearcherLength(batches or per_round.value, "batches" if batches else per_round.unit)
        length = searcher.max_length
        if length is None:
            return None
        batches = self.searcher_max_length_batches()
        if batches is not None:
            return SearcherLength(batches, "batches")
        return SearcherLength(length.value, length.unit)

    @property
    def time_limit_s(self) -> int | None:
        """The experiment's time limit in seconds: NNI's `maxExperimentDuration` (v1 `maxExecDuration`),
        which the NNI import records as `data.nni.max_experiment_duration_s`; None without one."""
        nni = self.data.get("nni")
        limit = nni.get("max_experiment_duration_s") if isinstance(nni, dict) else None
        return limit if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0 else None

    def past_time_limit(self, start_time: str | None, now: float) -> bool:
        """True once `time_limit_s` has passed since `start_time` (ISO 8601), at `now` (epoch seconds)."""
        limit = self.time_limit_s
        if limit is None or not start_time:
            return False
        try:
            started = datetime.fromisoformat(start_time).timestamp()
        except ValueError:
            return False
        return now >= started + limit

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


def _positive_ints(*values: Any) -> bool:
    return all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in values)


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
