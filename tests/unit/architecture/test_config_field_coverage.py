"""Every field a config accepts works or is warned about (issue 28): nothing is silently ignored.

`FIELDS` has a row for every field of every model `ExperimentConfig` reaches (keyed
`<the class that declares it>.<field>`, so a field every searcher inherits has one row):

- `Read(...)`: the functions ("module:qualname") that act on it; each must exist and name the field in its
  code (an attribute, a key string or a keyword argument; not its docstring);
- `Warned(example)`: accepted for compatibility only; a config giving `example` there parses with a
  warning naming the field's path (the model's `ignored_fields`), which `det experiment create` prints;
- `Only()`: a Literal of one value (e.g. `checkpoint_storage.type: s3`), so no choice can be ignored.

The walk fails on a field without a row (a new field nobody reads), and on a row without a field. NNI's
configs are walked the same way by their field names (`stratus.contract.nni`): every NNI field, given, changes the
translated config, is warned about, is refused by name, or is read by the CLI. The checks read source files
(ast) and parse configs; they import none of the trial-side packages.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import types
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, ForwardRef, Literal, Union, get_args, get_origin

import pytest
from pydantic import BaseModel, RootModel

from chalicelib.config import ConfigInvalidError, ExperimentConfig, parse_experiment_config, translate_nni
from chalicelib.config.sections import ResourcesConfig
from det._config import inline_nni_search_space, nni_code_directory
from stratus.contract.nni import TRAINING_SERVICE_SECTIONS, V1_KEYS, V2_ALGORITHM_FIELDS, V2_FIELDS


@dataclass(frozen=True)
class Read:
    where: tuple[str, ...]

    def __init__(self, *where: str) -> None:
        object.__setattr__(self, "where", where)


@dataclass(frozen=True)
class Warned:
    example: Any


@dataclass(frozen=True)
class Only:
    pass


SEARCHING = "chalicelib.services.searching"
SEARCH_SPECS = "chalicelib.services.search_specs"
TRAINER = "stratus.harness.pytorch._trainer:_TrainLoop"
ASHA = ("chalicelib.domain.searchers.asha_plan:plan",)
POOL = "chalicelib.domain.searchers.random:PoolSearcher"
PBT = "chalicelib.domain.searchers.pbt:PBTSearcher.__post_init__"
HYPERBAND = ("chalicelib.domain.searchers.hyperband:HyperbandSearcher.__post_init__",)
BOHB = "chalicelib.domain.searchers.bohb_model:BOHBSettings.from_settings"
HPARAMS = ("chalicelib.domain.hparams:sample_leaf", "chalicelib.domain.hparams:grid_values")
SEARCHER_NAME = Read("chalicelib.domain.searchers:new_searcher")
HP_TYPE = Read("chalicelib.domain.hparams:sample_leaf")
LENGTH = {
    "batches": Read(
        "chalicelib.config._base:Length.to_batches", "stratus.harness.pytorch._units:Scale.to_batches"
    ),
    "records": Read(
        "chalicelib.config._base:Length.to_batches", "stratus.harness.pytorch._units:Scale.to_batches"
    ),
    "epochs": Read(
        "stratus.harness.pytorch._units:Scale.to_batches",
        "stratus.harness.core._searcher_local:local_max_length",
    ),
}
ELASTIC = "chalicelib.services.elastic_scheduling"
IMAGE_FOR = Read("chalicelib.config.sections:EnvironmentConfig.image_for")
VARIABLES_FOR = Read("chalicelib.config.sections:EnvironmentConfig.variables_for")

FIELDS: dict[str, Read | Warned | Only] = {
    # ---- the experiment ----
    "ExperimentConfig.name": Read("chalicelib.services.experiments:create"),
    "ExperimentConfig.description": Read("chalicelib.services.experiments:create"),
    "ExperimentConfig.labels": Read("chalicelib.services.experiments:create"),
    "ExperimentConfig.workspace": Warned("research"),
    "ExperimentConfig.project": Warned("vision"),
    "ExperimentConfig.entrypoint": Read("chalicelib.services.runs:launch_spec"),
    "ExperimentConfig.hyperparameters": Read(f"{SEARCH_SPECS}:search_spec"),
    "ExperimentConfig.searcher": Read(f"{SEARCH_SPECS}:search_spec"),
    "ExperimentConfig.resources": Read(f"{SEARCHING}:_start_run"),
    "ExperimentConfig.checkpoint_storage": Read("chalicelib.services.retention:apply"),
    "ExperimentConfig.checkpoint_policy": Warned("all"),
    "ExperimentConfig.min_validation_period": Read(f"{TRAINER}.run"),
    "ExperimentConfig.min_checkpoint_period": Read(f"{TRAINER}.run"),
    "ExperimentConfig.max_restarts": Read(f"{SEARCHING}:_start_run"),
    "ExperimentConfig.scheduling_unit": Read(f"{TRAINER}.run"),
    "ExperimentConfig.records_per_epoch": Read(
        f"{TRAINER}.run", "chalicelib.config.schema:ExperimentConfig.searcher_length"
    ),
    "ExperimentConfig.perform_initial_validation": Read(f"{TRAINER}.__init__"),
    "ExperimentConfig.environment": Read("chalicelib.services.runs:launch_spec"),
    "ExperimentConfig.reproducibility": Read(f"{SEARCH_SPECS}:search_spec"),
    "ExperimentConfig.preemption_timeout": Warned(60),
    "ExperimentConfig.data": Read(
        "stratus.harness.pytorch._context:PyTorchTrialContext.get_data_config",
        "stratus.harness._info:ClusterInfo.user_data",
    ),
    "ExperimentConfig.debug": Warned(True),
    "ExperimentConfig.log_policies": Warned([{"pattern": "CUDA out of memory", "action": "cancel_retries"}]),
    "ExperimentConfig.bind_mounts": Warned([{"host_path": "/data", "container_path": "/data"}]),
    "ExperimentConfig.optimizations": Warned({"aggregation_frequency": 2}),
    "ExperimentConfig.profiling": Warned({"enabled": True}),
    "ExperimentConfig.tensorboard_storage": Warned({"type": "shared_fs"}),
    "ExperimentConfig.data_layer": Warned({"type": "shared_fs"}),
    "ExperimentConfig.slurm": Warned({"gpu_type": "a100"}),
    "ExperimentConfig.pbs": Warned({"slots_per_node": 4}),
    "ExperimentConfig.integrations": Warned({"pachyderm": {}}),
    "ExperimentConfig.elastic": Read("chalicelib.services.elastic:run_environment"),
    # ---- hyperparameters ----
    "ConstHP.type": HP_TYPE,
    "ConstHP.val": Read(*HPARAMS),
    "IntHP.type": HP_TYPE,
    "IntHP.minval": Read(*HPARAMS),
    "IntHP.maxval": Read(*HPARAMS),
    "IntHP.count": Read("chalicelib.domain.hparams:grid_values"),
    "DoubleHP.type": HP_TYPE,
    "DoubleHP.minval": Read(*HPARAMS),
    "DoubleHP.maxval": Read(*HPARAMS),
    "DoubleHP.count": Read("chalicelib.domain.hparams:grid_values"),
    "LogHP.type": HP_TYPE,
    "LogHP.base": Read(*HPARAMS),
    "LogHP.minval": Read(*HPARAMS),
    "LogHP.maxval": Read(*HPARAMS),
    "LogHP.count": Read("chalicelib.domain.hparams:grid_values"),
    "CategoricalHP.type": HP_TYPE,
    "CategoricalHP.vals": Read(*HPARAMS),
    # ---- searchers: what every one takes, then each one's own ----
    "_Searcher.metric": Read("chalicelib.domain.searchers.base:SearchSpec.metric"),
    "_Searcher.smaller_is_better": Read("chalicelib.domain.searchers.base:SearchSpec.smaller_is_better"),
    "_Searcher.source_trial_id": Read("chalicelib.services.warm_start:check_source"),
    "_Searcher.source_checkpoint_uuid": Read("chalicelib.services.warm_start:check_source"),
    "_Searcher.max_length": Read("chalicelib.config.schema:ExperimentConfig.searcher_length"),
    **{
        f"{name}.name": SEARCHER_NAME
        for name in ("SingleSearcher", "GridSearcher", "RandomSearcher", "TPESearcher")
    },
    **{
        f"{name}.name": SEARCHER_NAME for name in ("AdaptiveASHASearcher", "PBTSearcher", "HyperbandSearcher")
    },
    "BOHBSearcher.name": SEARCHER_NAME,
    "GridSearcher.max_concurrent_trials": Read(f"{POOL}.max_concurrent"),
    "_TrialBudget.max_trials": Read(f"{POOL}.budget"),
    "_TrialBudget.until_stopped": Read(f"{POOL}.budget"),
    "_TrialBudget.max_concurrent_trials": Read(f"{POOL}.max_concurrent"),
    "AdaptiveASHASearcher.max_trials": Read(*ASHA),
    "AdaptiveASHASearcher.time_metric": Read("chalicelib.config.schema:ExperimentConfig.searcher_length"),
    "AdaptiveASHASearcher.max_time": Read("chalicelib.config.schema:ExperimentConfig.searcher_length"),
    "AdaptiveASHASearcher.divisor": Read(*ASHA),
    "AdaptiveASHASearcher.max_rungs": Read(*ASHA),
    "AdaptiveASHASearcher.mode": Read(*ASHA),
    "AdaptiveASHASearcher.bracket_rungs": Read(*ASHA),
    "AdaptiveASHASearcher.stop_once": Read(
        "chalicelib.domain.searchers.asha:AdaptiveASHASearcher.__post_init__"
    ),
    "AdaptiveASHASearcher.max_concurrent_trials": Read(*ASHA),
    "PBTSearcher.population_size": Read(PBT),
    "PBTSearcher.num_rounds": Read(PBT),
    "PBTSearcher.length_per_round": Read(PBT, "chalicelib.config.schema:ExperimentConfig.searcher_length"),
    "PBTSearcher.replace_function": Read(PBT),
    "PBTSearcher.explore_function": Read(PBT),
    "PBTReplaceFunction.truncate_fraction": Read(PBT),
    "PBTExploreFunction.resample_probability": Read(PBT),
    "PBTExploreFunction.perturb_factor": Read(PBT),
    "HyperbandSearcher.max_length": Read("chalicelib.domain.searchers.hyperband_plan:plan"),
    "HyperbandSearcher.divisor": Read(*HYPERBAND),
    "HyperbandSearcher.max_trials": Read(*HYPERBAND),
    "HyperbandSearcher.iterations": Read(*HYPERBAND),
    "HyperbandSearcher.max_rungs": Read("chalicelib.domain.searchers.hyperband_plan:plan"),
    "HyperbandSearcher.until_stopped": Read(*HYPERBAND),
    "HyperbandSearcher.max_concurrent_trials": Read(*HYPERBAND),
    **{
        f"BOHBSearcher.{name}": Read(BOHB)
        for name in ("top_n_percent", "num_samples", "random_fraction", "bandwidth_factor", "min_bandwidth")
    },
    "BOHBSearcher.min_points_in_model": Read(BOHB),
    # ---- lengths ----
    **{f"Length.{unit}": read for unit, read in LENGTH.items()},
    **{f"PositiveLength.{unit}": read for unit, read in LENGTH.items()},
    # ---- resources ----
    "ResourcesConfig.slots_per_trial": Read(
        f"{SEARCHING}:_start_run", "chalicelib.services.pools:check_request_fits"
    ),
    "ResourcesConfig.resource_pool": Read("chalicelib.services.experiments:create"),
    "ResourcesConfig.priority": Read("chalicelib.domain.records:Experiment.job_priority"),
    "ResourcesConfig.weight": Read("chalicelib.services.experiments:create"),
    "ResourcesConfig.max_slots": Read("chalicelib.domain.records:Experiment.job_max_slots"),
    "ResourcesConfig.shm_size": Warned("4G"),
    "ResourcesConfig.is_single_node": Warned(True),
    "ResourcesConfig.devices": Warned([{"host_path": "/dev/fuse", "container_path": "/dev/fuse"}]),
    "ResourcesConfig.agent_label": Warned("gpu-a"),
    "ResourcesConfig.native_parallel": Warned(True),
    "ResourcesConfig.slots": Warned(2),
    # ---- checkpoint storage ----
    "CheckpointStorageConfig.type": Only(),
    "CheckpointStorageConfig.bucket": Warned("my-bucket"),
    "CheckpointStorageConfig.prefix": Warned("experiments"),
    "CheckpointStorageConfig.endpoint_url": Warned("https://s3.example.com"),
    "CheckpointStorageConfig.save_experiment_best": Read("chalicelib.services.retention:apply"),
    "CheckpointStorageConfig.save_trial_best": Read("chalicelib.services.retention:apply"),
    "CheckpointStorageConfig.save_trial_latest": Read("chalicelib.services.retention:apply"),
    # ---- environment ----
    "EnvironmentConfig.image": Read(
        "chalicelib.compute.batch:BatchJobs._image", "chalicelib.services.images:note_unused_image"
    ),
    "EnvironmentConfig.environment_variables": VARIABLES_FOR,
    "EnvironmentConfig.force_pull_image": Warned(True),
    "EnvironmentConfig.ports": Warned({"tensorboard": 6006}),
    "EnvironmentConfig.pod_spec": Warned({"spec": {}}),
    "EnvironmentConfig.add_capabilities": Warned(["SYS_ADMIN"]),
    "EnvironmentConfig.drop_capabilities": Warned(["NET_RAW"]),
    "EnvironmentConfig.proxy_ports": Warned([{"proxy_port": 8888}]),
    "ImageMap.cpu": IMAGE_FOR,
    "ImageMap.cuda": IMAGE_FOR,
    "ImageMap.gpu": IMAGE_FOR,
    "ImageMap.rocm": Warned("rocm/pytorch"),
    "EnvironmentVariablesMap.cpu": VARIABLES_FOR,
    "EnvironmentVariablesMap.cuda": VARIABLES_FOR,
    "EnvironmentVariablesMap.gpu": VARIABLES_FOR,
    "EnvironmentVariablesMap.rocm": Warned(["HIP_VISIBLE_DEVICES=0"]),
    "ReproducibilityConfig.experiment_seed": Read(f"{SEARCH_SPECS}:search_spec"),
    # ---- an elastic (AdaptDL) trial ----
    "ElasticConfig.framework": Only(),
    "ElasticConfig.min_replicas": Read(f"{ELASTIC}:RunElastic.of"),
    "ElasticConfig.max_replicas": Read("chalicelib.config.sections:ElasticConfig.replica_limit"),
    "ElasticConfig.slots_per_replica": Read("chalicelib.services.elastic:run_environment"),
    "ElasticConfig.min_rescale_interval_s": Read(f"{ELASTIC}:queued_elastic"),
    "ElasticConfig.speedup_threshold": Read(f"{ELASTIC}:queued_elastic"),
    "ElasticConfig.checkpoint_size_limit": Warned("1Gi"),
}

#: The smallest config of each searcher: where a searcher's own field is given.
SEARCHERS: dict[str, dict[str, Any]] = {
    "single": {"name": "single", "metric": "loss"},
    "grid": {"name": "grid", "metric": "loss"},
    "random": {"name": "random", "metric": "loss", "max_trials": 2},
    "tpe": {"name": "tpe", "metric": "loss", "max_trials": 2},
    "adaptive_asha": {"name": "adaptive_asha", "metric": "loss", "max_trials": 2, "max_length": 8},
    "pbt": {
        "name": "pbt",
        "metric": "loss",
        "population_size": 2,
        "num_rounds": 2,
        "length_per_round": 4,
        "replace_function": {"truncate_fraction": 0.5},
        "explore_function": {"resample_probability": 0.2, "perturb_factor": 0.2},
    },
    "hyperband": {"name": "hyperband", "metric": "loss", "max_length": 9},
    "bohb": {"name": "bohb", "metric": "loss", "max_length": 9},
}


# ---- the walk -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Field:
    key: str  # `<declaring class>.<field>`
    path: tuple[str, ...]  # where it is given, from the config's root
    model: type[BaseModel]  # the model it was reached on


def _models(tp: Any) -> Iterator[type[BaseModel]]:
    """The config models a field's type holds (through unions, lists, mappings and Annotated)."""
    if hasattr(tp, "__value__") or isinstance(tp, str | ForwardRef):
        return  # pydantic's JsonValue (a recursive alias): plain YAML values, no models
    origin = get_origin(tp)
    if origin is Annotated:
        yield from _models(get_args(tp)[0])
    elif origin in (Union, types.UnionType, list, dict, Mapping):
        for arg in get_args(tp):
            yield from _models(arg)
    elif isinstance(tp, type) and issubclass(tp, BaseModel):  # a RootModel too (a group of hyperparameters)
        yield tp


def _declaring(model: type[BaseModel], name: str) -> type[BaseModel]:
    return next(c for c in model.__mro__ if name in c.__dict__.get("__annotations__", {}))


def walk(root: type[BaseModel]) -> dict[str, Field]:
    """Every field of every model `root` reaches, by key (the first path it is reached on)."""
    found: dict[str, Field] = {}
    seen: set[type[BaseModel]] = set()

    def visit(model: type[BaseModel], path: tuple[str, ...]) -> None:
        if model in seen:
            return
        seen.add(model)
        if issubclass(model, RootModel):  # its `root` is no field a user writes: what it holds is
            for inner in _models(model.model_fields["root"].annotation):
                visit(inner, path)
            return
        for name, info in model.model_fields.items():
            key = f"{_declaring(model, name).__name__}.{name}"
            found.setdefault(key, Field(key, (*path, name), model))
            for inner in _models(info.annotation):
                visit(inner, (*path, name))

    visit(root, ())
    return found


def uncovered(root: type[BaseModel], table: Mapping[str, object]) -> list[str]:
    """The fields `root` accepts that `table` has no row for."""
    return sorted(set(walk(root)) - set(table))


# ---- reading the code ---------------------------------------------------------------------------------


def _function(where: str) -> ast.FunctionDef | ast.AsyncFunctionDef:
    module, _, qualname = where.partition(":")
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin, f"{where}: no module {module}"
    node: ast.AST = ast.parse(Path(spec.origin).read_text())
    for part in qualname.split("."):
        found = next(
            (
                n
                for n in ast.iter_child_nodes(node)
                if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and n.name == part
            ),
            None,
        )
        assert found is not None, f"{where}: {module} has no {qualname}"
        node = found
    assert isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef), f"{where} is not a function"
    return node


def names_in_code(where: str) -> set[str]:
    """The attributes, strings and keyword names a function's code uses (its docstring left out)."""
    function = _function(where)
    body = function.body
    docstring = (
        body[0]
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
        else None
    )
    names: set[str] = set()
    for node in ast.walk(function):
        if node is docstring:
            continue
        if isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names.add(node.value)
        elif isinstance(node, ast.keyword) and node.arg:
            names.add(node.arg)
        elif isinstance(node, ast.Name):
            names.add(node.id)
    return names


# ---- giving a field a value ---------------------------------------------------------------------------

MINIMAL: dict[str, Any] = {"entrypoint": "python3 train.py", "searcher": SEARCHERS["single"]}


def config_giving(field: Field, value: Any) -> dict[str, Any]:
    """The smallest valid config that gives `field` the `value` (inside its searcher, for a searcher's)."""
    config: dict[str, Any] = dict(MINIMAL)
    searcher_name = getattr(field.model, "model_fields", {}).get("name")
    if field.path[0] == "searcher" and searcher_name is not None and isinstance(searcher_name.default, str):
        config["searcher"] = dict(SEARCHERS[searcher_name.default])
    node = config
    for part in field.path[:-1]:
        inner = node.get(part)
        node[part] = dict(inner) if isinstance(inner, dict) else {}
        node = node[part]
    node[field.path[-1]] = value
    return config


# ---- the Determined side ------------------------------------------------------------------------------

WALKED = walk(ExperimentConfig)


def test_every_field_the_config_accepts_has_a_row() -> None:
    missing = uncovered(ExperimentConfig, FIELDS)
    assert not missing, (
        "fields no row says are read or warned about (add a row to FIELDS: the code that acts on each, or "
        f"an entry in its model's ignored_fields and a Warned row): {missing}"
    )
    stale = sorted(set(FIELDS) - set(WALKED))
    assert not stale, f"rows for fields the config no longer has: {stale}"


@pytest.mark.parametrize("key", sorted(k for k, row in FIELDS.items() if isinstance(row, Read)))
def test_a_read_field_is_named_by_the_code_that_reads_it(key: str) -> None:
    name = key.rpartition(".")[2]
    row = FIELDS[key]
    assert isinstance(row, Read)
    for where in row.where:
        assert name in names_in_code(where), f"{key}: {where} does not read {name!r}"


@pytest.mark.parametrize("key", sorted(k for k, row in FIELDS.items() if isinstance(row, Warned)))
def test_a_field_accepted_for_compatibility_is_warned_about_when_given(key: str) -> None:
    field, row = WALKED[key], FIELDS[key]
    assert isinstance(row, Warned)
    parsed = parse_experiment_config(config_giving(field, row.example))
    path = ".".join(field.path)
    assert [w for w in parsed.warnings if w.startswith(f"{path}: ignored by Stratus (")], parsed.warnings


@pytest.mark.parametrize("key", sorted(k for k, row in FIELDS.items() if isinstance(row, Only)))
def test_a_field_with_one_value_has_no_choice_to_ignore(key: str) -> None:
    field = WALKED[key]
    info = field.model.model_fields[key.rpartition(".")[2]]
    assert get_origin(info.annotation) is Literal and get_args(info.annotation) == (info.default,)


def test_a_field_read_by_no_code_fails_the_walk() -> None:
    """The walk finds a new field at any depth: one added and never read fails the first test above."""

    class Resources(ResourcesConfig):
        gang_schedule: bool = False

    class Extended(ExperimentConfig):
        resources: Resources = Resources()  # declared anew here: a row of its own too
        new_knob: int = 0

    assert uncovered(Extended, FIELDS) == [
        "Extended.new_knob",
        "Extended.resources",
        "Resources.gang_schedule",
    ]
    assert "gang_schedule" not in names_in_code(f"{SEARCHING}:_start_run")  # and a Read row would not pass


# ---- the NNI side -------------------------------------------------------------------------------------

SPACE = {"lr": {"_type": "choice", "_value": [0.1, 0.01]}}
NNI_V2: dict[str, Any] = {
    "trialCommand": "python3 trial.py",
    "searchSpace": SPACE,
    "tuner": {"name": "TPE"},
    "maxTrialNumber": 2,
    "trialConcurrency": 1,
}
NNI_V1: dict[str, Any] = {
    "trial": {"command": "python3 trial.py"},
    "searchSpace": SPACE,
    "tuner": {"builtinTunerName": "TPE"},
    "maxTrialNum": 2,
    "trialConcurrency": 1,
}
#: NNI fields the CLI reads, not the translation (`test_the_nni_fields_the_cli_reads`).
NNI_CLI_READ = frozenset({"trialCodeDirectory", "searchSpacePath"})
#: A value for each NNI field that differs from the base config's (or is absent from it).
NNI_EXAMPLES: dict[str, Any] = {
    "advisor": {"name": "Hyperband", "classArgs": {"R": 9, "eta": 3}},
    "assessor": {"name": "Medianstop"},
    "debug": True,
    "experimentName": "imported",
    "experimentType": "hpo",
    "experimentWorkingDirectory": "~/nni-experiments",
    "logLevel": "debug",
    "maxExperimentDuration": "1h",
    "maxTrialDuration": "10m",
    "maxTrialNumber": 4,
    "nniManagerIp": "10.0.0.1",
    "searchSpace": {"lr": {"_type": "uniform", "_value": [0.0, 1.0]}},
    "searchSpaceFile": "search_space.json",
    "sharedStorage": {"storageType": "NFS"},
    "trainingService": {"platform": "remote"},
    "trialCodeDirectory": ".",
    "trialCommand": "python3 other.py",
    "trialConcurrency": 2,
    "trialGpuNumber": 2,
    "tuner": {"name": "Random"},
    "tunerGpuIndices": [0],
    "useAnnotation": True,
    # v1
    "authorName": "someone",
    "trainingServicePlatform": "remote",
    "searchSpacePath": "search_space.json",
    "maxTrialNum": 4,
    "maxExecDuration": "1h",
    "trial": {"command": "python3 other.py"},
    "logDir": "/tmp/nni",
    "multiThread": True,
    "versionCheck": False,
    "logCollection": "http",
    **{section: {"anything": 1} for section in TRAINING_SERVICE_SECTIONS},
}
#: The fields of a tuner, assessor or advisor section (v2 names).
NNI_ALGORITHM_EXAMPLES: dict[str, Any] = {
    "name": "Random",
    "className": "my_tuner.MyTuner",
    "codeDirectory": ".",
    "classArgs": {"optimize_mode": "maximize"},
}


def _translated(raw: dict[str, Any]) -> tuple[dict[str, Any] | None, str]:
    """The translated config (None when refused) and every warning and problem as one text."""
    try:
        translation = translate_nni(raw)
    except ConfigInvalidError as error:
        return None, str(error)
    return translation.config, "\n".join(translation.warnings)


def _acts_on(base: dict[str, Any], changed: dict[str, Any], field: str) -> bool:
    """Whether the translation acts on `field`: the config differs, or a warning or problem names it."""
    config, _ = _translated(base)
    other, notes = _translated(changed)
    return other != config or re.search(rf"(^|[\s.]){re.escape(field)}\b", notes) is not None


def test_every_nni_field_has_an_example() -> None:
    fields = set(V2_FIELDS) | set(V1_KEYS)
    assert sorted(fields - set(NNI_EXAMPLES)) == [], "add the new NNI fields to NNI_EXAMPLES"
    assert sorted(set(NNI_EXAMPLES) - fields) == []


@pytest.mark.parametrize("field", sorted((set(V2_FIELDS) | set(V1_KEYS)) - NNI_CLI_READ))
def test_every_nni_field_given_is_translated_warned_about_or_refused(field: str) -> None:
    base = NNI_V2 if field in V2_FIELDS else NNI_V1
    assert _acts_on(base, {**base, field: NNI_EXAMPLES[field]}, field), f"{field} is silently ignored"


@pytest.mark.parametrize("field", V2_ALGORITHM_FIELDS)
def test_every_field_of_a_tuner_section_is_acted_on(field: str) -> None:
    tuner = {"name": "TPE", field: NNI_ALGORITHM_EXAMPLES[field]}
    assert _acts_on(NNI_V2, {**NNI_V2, "tuner": tuner}, field), f"tuner.{field} is silently ignored"


def test_the_nni_fields_the_cli_reads(tmp_path: Path) -> None:
    """`det experiment create` inlines the search-space file and packs the trial code folder."""
    (tmp_path / "space.json").write_text(json.dumps(SPACE))
    config_path = tmp_path / "config.yml"
    for key in ("searchSpacePath", "searchSpaceFile"):
        config: dict[str, Any] = {key: "space.json"}
        inline_nni_search_space(config, config_path)
        assert config == {"searchSpace": SPACE}
    assert (
        nni_code_directory({"trialCodeDirectory": "src"}, config_path).resolve()
        == (tmp_path / "src").resolve()
    )
    assert (
        nni_code_directory({"trial": {"codeDir": "src"}}, config_path).resolve()
        == (tmp_path / "src").resolve()
    )
