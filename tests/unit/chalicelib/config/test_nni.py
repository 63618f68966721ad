"""Importing NNI experiment configs (chalicelib/config/nni.py) and their way into `validate()`.

The YAML examples follow the shapes of NNI's own documentation: the v2 reference's local-mode
examples and the legacy v1 mnist config with an assessor.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from chalicelib import config as cfg
from chalicelib.config import (
    ConfigInvalidError,
    NniTranslation,
    parse_experiment_config,
    translate_nni,
)
from chalicelib.config.nni import GRID_COUNT, GRID_INT_LIMIT, MAX_GRID_POINTS
from chalicelib.services import experiments
from stratus.contract.nni import is_nni_config, nni_config_version

V2_FILE = """\
experimentName: MNIST
searchSpaceFile: search_space.json
trialCommand: python mnist.py
trialCodeDirectory: .
trialGpuNumber: 1
trialConcurrency: 2
maxExperimentDuration: 24h
maxTrialNumber: 100
tuner:
  name: TPE
  classArgs:
    optimize_mode: maximize
trainingService:
  platform: local
  useActiveGpu: True
"""

V2_INLINE = """\
searchSpace:
  batch_size:
    _type: choice
    _value: [16, 32, 64]
  learning_rate:
    _type: loguniform
    _value: [0.0001, 0.1]
trialCommand: python mnist.py
trialGpuNumber: 1
trialConcurrency: 2
maxTrialNumber: 20
tuner:
  name: TPE
  classArgs:
    optimize_mode: maximize
trainingService:
  platform: local
  useActiveGpu: True
"""

V1 = """\
authorName: default
experimentName: example_mnist
trialConcurrency: 1
maxExecDuration: 1h
maxTrialNum: 10
trainingServicePlatform: local
searchSpacePath: search_space.json
useAnnotation: false
tuner:
  builtinTunerName: TPE
  classArgs:
    optimize_mode: maximize
assessor:
  builtinAssessorName: Medianstop
  classArgs:
    optimize_mode: maximize
trial:
  command: python3 mnist.py
  codeDir: .
  gpuNum: 0
"""

SEARCH_SPACE = {
    "dropout_rate": {"_type": "uniform", "_value": [0.5, 0.9]},
    "conv_size": {"_type": "choice", "_value": [2, 3, 5, 7]},
    "hidden_size": {"_type": "choice", "_value": [124, 512, 1024]},
    "batch_size": {"_type": "choice", "_value": [1, 4, 8, 16, 32]},
    "learning_rate": {"_type": "choice", "_value": [0.0001, 0.001, 0.01, 0.1]},
}


def load(text: str) -> dict[str, Any]:
    data = yaml.safe_load(text)
    assert isinstance(data, dict)
    return data


def translate(raw: dict[str, Any], space: dict[str, Any] | None = None) -> NniTranslation:
    """Translate, and check that the result is a valid Stratus config."""
    translation = translate_nni(raw, space if space is not None else raw.get("searchSpace"))
    parse_experiment_config(translation.config)
    return translation


def v2(**fields: Any) -> dict[str, Any]:
    """A small valid v2 config; `fields` replace or add keys (None removes one)."""
    raw: dict[str, Any] = {
        "searchSpace": {"x": {"_type": "uniform", "_value": [0, 1]}},
        "trialCommand": "python3 train.py",
        "trialConcurrency": 2,
        "maxTrialNumber": 8,
        "tuner": {"name": "TPE", "classArgs": {"optimize_mode": "minimize"}},
    }
    for key, value in fields.items():
        if value is None:
            raw.pop(key, None)
        else:
            raw[key] = value
    return raw


def space_of(spec: dict[str, Any], tuner: str = "TPE") -> NniTranslation:
    return translate(
        v2(searchSpace={"p": spec}, tuner={"name": tuner, "classArgs": {"optimize_mode": "minimize"}})
    )


def warnings_about(translation: NniTranslation, path: str) -> list[str]:
    return [w for w in translation.warnings if w.startswith(f"{path}: ")]


def problems(raw: dict[str, Any], space: Any = None) -> dict[str, str]:
    with pytest.raises(ConfigInvalidError) as info:
        translate_nni(raw, space if space is not None else raw.get("searchSpace"))
    return {p.path: p.message for p in info.value.problems}


# --- the documentation's examples ---------------------------------------------------------------


def test_v2_example_with_a_search_space_file() -> None:
    raw = load(V2_FILE)
    assert is_nni_config(raw) and nni_config_version(raw) == 2

    translation = translate(raw, SEARCH_SPACE)

    assert translation.config == {
        "name": "MNIST",
        "entrypoint": "python mnist.py",
        "hyperparameters": {
            "dropout_rate": {"type": "double", "minval": 0.5, "maxval": 0.9},
            "conv_size": {"type": "categorical", "vals": [2, 3, 5, 7]},
            "hidden_size": {"type": "categorical", "vals": [124, 512, 1024]},
            "batch_size": {"type": "categorical", "vals": [1, 4, 8, 16, 32]},
            "learning_rate": {"type": "categorical", "vals": [0.0001, 0.001, 0.01, 0.1]},
        },
        "searcher": {
            "name": "tpe",
            "metric": "default",
            "smaller_is_better": False,
            "max_trials": 100,
            "max_concurrent_trials": 2,
        },
        "resources": {"slots_per_trial": 1},
        "max_restarts": 0,
        "data": {"nni": {"version": 2, "tuner": "TPE", "max_experiment_duration_s": 86400}},
    }
    assert translation.warnings == [
        "maxExperimentDuration: the experiment's time limit, 86400 s (data.nni.max_experiment_duration_s): "
        "once it has passed, the next trial event creates no more trials and stops the running ones",
        "trainingService: ignored (Stratus runs trials on its own compute backends; "
        "resources.resource_pool picks one)",
    ]


def test_v2_example_with_an_inline_search_space_parses_with_defaults() -> None:
    raw = load(V2_INLINE)

    translation = translate(raw)
    parsed = parse_experiment_config(translation.config).config

    assert parsed.searcher.name == "tpe" and parsed.searcher.metric == "default"
    assert parsed.searcher.smaller_is_better is False
    assert parsed.hyperparameters["learning_rate"].model_dump() == {
        "type": "log",
        "base": 10.0,
        "minval": -4.0,
        "maxval": -1.0,
        "count": None,
    }
    assert parsed.name is None  # the service names it "Experiment <id>"
    assert parsed.max_restarts == 0
    assert parsed.data == {"nni": {"version": 2, "tuner": "TPE"}}
    assert [w.split(":")[0] for w in translation.warnings] == ["trainingService"]


def test_v1_example_with_assessor() -> None:
    raw = load(V1)
    raw["searchSpace"] = SEARCH_SPACE  # what the CLI sends in place of searchSpacePath
    del raw["searchSpacePath"]
    assert is_nni_config(raw) and nni_config_version(raw) == 1

    translation = translate(raw)

    config = translation.config
    assert config["name"] == "example_mnist"
    assert config["entrypoint"] == "python3 mnist.py"
    assert config["searcher"] == {
        "name": "tpe",
        "metric": "default",
        "smaller_is_better": False,
        "max_trials": 10,
        "max_concurrent_trials": 1,
    }
    assert config["resources"] == {"slots_per_trial": 1}
    assert config["data"] == {
        "nni": {"version": 1, "tuner": "TPE", "max_experiment_duration_s": 3600, "assessor": "Medianstop"}
    }
    assert translation.warnings == [
        "trial.gpuNum: 0 GPUs: each trial gets 1 slot (resources.slots_per_trial: 1), a CPU slot on "
        "a CPU resource pool; on a GPU pool that slot is a GPU",
        "maxExecDuration: the experiment's time limit, 3600 s (data.nni.max_experiment_duration_s): "
        "once it has passed, the next trial event creates no more trials and stops the running ones",
        "assessor: ignored (Stratus has no assessor, so the Medianstop assessor stops no trial early; "
        "for early stopping, use Stratus' adaptive_asha searcher instead)",
        "authorName: ignored (the submitting user is recorded as the experiment's owner)",
        "trainingServicePlatform: ignored (Stratus runs trials on its own compute backends; "
        "resources.resource_pool picks one)",
    ]  # useAnnotation: false is NNI's default: nothing to warn about


# --- search-space types -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "expected", "warns"),
    [
        (
            {"_type": "choice", "_value": ["adam", "sgd"]},
            {"type": "categorical", "vals": ["adam", "sgd"]},
            False,
        ),
        ({"_type": "randint", "_value": [2, 6]}, {"type": "int", "minval": 2, "maxval": 5}, False),
        ({"_type": "randint", "_value": [10]}, {"type": "int", "minval": 0, "maxval": 9}, False),
        ({"_type": "randint", "_value": [-3.0, -1]}, {"type": "int", "minval": -3, "maxval": -2}, False),
        ({"_type": "uniform", "_value": [0.1, 0.5]}, {"type": "double", "minval": 0.1, "maxval": 0.5}, False),
        ({"_type": "uniform", "_value": [0, 1]}, {"type": "double", "minval": 0.0, "maxval": 1.0}, False),
        (
            {"_type": "loguniform", "_value": [0.0001, 0.1]},
            {"type": "log", "base": 10.0, "minval": -4.0, "maxval": -1.0},
            False,
        ),
        ({"_type": "quniform", "_value": [1, 100, 1]}, {"type": "int", "minval": 1, "maxval": 100}, False),
        (
            {"_type": "quniform", "_value": [0, 10, 2.5]},
            {"type": "categorical", "vals": [0.0, 2.5, 5.0, 7.5, 10.0]},
            True,
        ),
        ({"_type": "quniform", "_value": [2, 10, 5]}, {"type": "categorical", "vals": [2, 5, 10]}, True),
        (
            {"_type": "quniform", "_value": [0, 1, 0.1]},
            {"type": "categorical", "vals": [i / 10 for i in range(11)]},
            True,
        ),
        ({"_type": "quniform", "_value": [0, 1000, 2]}, {"type": "int", "minval": 0, "maxval": 1000}, True),
        (
            {"_type": "quniform", "_value": [0, 1, 0.001]},
            {"type": "double", "minval": 0.0, "maxval": 1.0},
            True,
        ),
        (
            {"_type": "qloguniform", "_value": [1, 16, 4]},
            {"type": "categorical", "vals": [1, 4, 8, 12, 16]},
            True,
        ),
        (
            {"_type": "qloguniform", "_value": [1, 1000, 1]},
            {"type": "log", "base": 10.0, "minval": 0.0, "maxval": 3.0},
            True,
        ),
        ({"_type": "normal", "_value": [0, 1]}, {"type": "double", "minval": -3.0, "maxval": 3.0}, True),
        ({"_type": "normal", "_value": [10, 0.5]}, {"type": "double", "minval": 8.5, "maxval": 11.5}, True),
        ({"_type": "qnormal", "_value": [0, 1, 1]}, {"type": "int", "minval": -3, "maxval": 3}, True),
        (
            {"_type": "qnormal", "_value": [0, 1, 2]},
            {"type": "categorical", "vals": [-4, -2, 0, 2, 4]},
            True,
        ),
        (
            {"_type": "lognormal", "_value": [0, 1]},
            {"type": "log", "base": 10.0, "minval": -3 / math.log(10), "maxval": 3 / math.log(10)},
            True,
        ),
        (
            {"_type": "qlognormal", "_value": [0, 1, 5]},
            {"type": "categorical", "vals": [0, 5, 10, 15, 20]},
            True,
        ),
        (
            {"_type": "qlognormal", "_value": [0, 2, 0.01]},
            {"type": "log", "base": 10.0, "minval": -6 / math.log(10), "maxval": 6 / math.log(10)},
            True,
        ),
    ],
)
def test_search_space_types(spec: dict[str, Any], expected: dict[str, Any], warns: bool) -> None:
    translation = space_of(spec)

    hp = translation.config["hyperparameters"]["p"]
    assert hp.keys() == expected.keys()
    for key, value in expected.items():
        if isinstance(value, float):
            assert hp[key] == pytest.approx(value), key
        else:
            assert hp[key] == value, key
    assert bool(warnings_about(translation, "searchSpace.p")) is warns


@pytest.mark.parametrize(
    ("spec", "warning"),
    [
        (
            {"_type": "quniform", "_value": [0, 10, 2.5]},
            "quniform: sampled as one of its 5 grid points (a categorical: the searcher treats them as "
            "unordered)",
        ),
        (
            {"_type": "qloguniform", "_value": [1, 1000, 1]},
            "qloguniform: values are not rounded to multiples of q=1",
        ),
        (
            {"_type": "normal", "_value": [0, 1]},
            "normal: sampled uniformly over mu ± 3·sigma = [-3, 3], not normally",
        ),
        (
            {"_type": "qnormal", "_value": [0, 1, 2]},
            "qnormal: sampled uniformly over mu ± 3·sigma = [-4, 4], not normally, sampled as one of its 5 "
            "grid points (a categorical: the searcher treats them as unordered)",
        ),
        (
            {"_type": "lognormal", "_value": [0, 1]},
            "lognormal: sampled log-uniformly over exp(mu ± 3·sigma) = [0.0497871, 20.0855], not log-normally",
        ),
    ],
    ids=["quniform", "qloguniform", "normal", "qnormal", "lognormal"],
)
def test_quantised_and_normal_warnings_say_what_changed(spec: dict[str, Any], warning: str) -> None:
    assert warnings_about(space_of(spec), "searchSpace.p") == [f"searchSpace.p: {warning}"]


def test_a_grid_of_more_than_max_points_is_not_enumerated() -> None:
    small = space_of({"_type": "quniform", "_value": [0, MAX_GRID_POINTS - 1, 1.0]})
    large = space_of({"_type": "quniform", "_value": [0, MAX_GRID_POINTS * 0.5, 0.5]})

    assert small.config["hyperparameters"]["p"]["type"] == "int"
    assert large.config["hyperparameters"]["p"] == {"type": "double", "minval": 0.0, "maxval": 16.0}


def test_nested_choice_becomes_a_categorical_of_names_with_a_warning() -> None:
    space = {
        "layer": {
            "_type": "choice",
            "_value": [
                {"_name": "Empty"},
                {"_name": "Conv", "kernel_size": {"_type": "choice", "_value": [1, 2, 3, 5]}},
                {"_name": "Max_pool", "pooling_size": {"_type": "choice", "_value": [2, 3, 5]}},
            ],
        },
        "flat": {"_type": "choice", "_value": [{"_name": "a"}, {"_name": "b"}]},
    }

    translation = translate(v2(searchSpace=space))

    hps = translation.config["hyperparameters"]
    assert hps["layer"] == {"type": "categorical", "vals": ["Empty", "Conv", "Max_pool"]}
    assert hps["flat"] == {"type": "categorical", "vals": ["a", "b"]}
    assert warnings_about(translation, "searchSpace.layer") == [
        "searchSpace.layer: nested search space: each trial receives the chosen option's _name, not "
        "NNI's {_name: ...} mapping; the options' own parameters (Conv.kernel_size, "
        "Max_pool.pooling_size) are not sampled"
    ]
    assert warnings_about(translation, "searchSpace.flat") == [
        "searchSpace.flat: nested search space: each trial receives the chosen option's _name, not "
        "NNI's {_name: ...} mapping"
    ]


def test_choice_keeps_any_json_values() -> None:
    spec = {"_type": "choice", "_value": [[1, 2], {"k": "v"}, None, "s", 1.5]}

    translation = space_of(spec)

    assert translation.config["hyperparameters"]["p"] == {"type": "categorical", "vals": spec["_value"]}
    assert warnings_about(translation, "searchSpace.p") == []


def test_every_bad_search_space_entry_is_reported() -> None:
    space = {
        "a": {"_type": "uniform", "_value": [1, 0]},
        "b": {"_type": "randint", "_value": [5, 5]},
        "c": {"_type": "loguniform", "_value": [0, 1]},
        "d": {"_type": "gaussian", "_value": [0, 1]},
        "e": {"_value": [1, 2]},
        "f": {"_type": "choice", "_value": []},
        "g": {"_type": "quniform", "_value": [0, 1]},
        "h": {"_type": "normal", "_value": [0, -1]},
        "i": {"_type": "quniform", "_value": [0, 1, 0]},
        "j": {"_type": "uniform", "_value": "0..1"},
        "k": {"_type": "randint", "_value": [0.5, 3]},
        "l": {"_type": "uniform", "_value": [True, 2]},
    }

    found = problems(v2(searchSpace=space))

    assert found == {
        "searchSpace.a._value": "low (1) must be ≤ high (0)",
        "searchSpace.b._value": "upper (5) is exclusive, so it must be greater than lower (5)",
        "searchSpace.c._value": "low must be > 0 for a log-uniform range",
        "searchSpace.d._type": 'unknown type "gaussian"; expected one of choice, randint, uniform, '
        "quniform, loguniform, qloguniform, normal, qnormal, lognormal, qlognormal",
        "searchSpace.e": "must be a mapping with _type and _value, e.g. {_type: uniform, _value: [0, 1]}",
        "searchSpace.f._value": "must list at least one option",
        "searchSpace.g._value": "must be [low, high, q] (numbers)",
        "searchSpace.h._value": "sigma must be > 0",
        "searchSpace.i._value": "q must be > 0",
        "searchSpace.j._value": "required: a list of the type's arguments",
        "searchSpace.k._value": "must be [lower, upper] (whole numbers; upper is exclusive)",
        "searchSpace.l._value": "must be [low, high] (numbers)",
    }


def test_a_missing_search_space_is_a_problem() -> None:
    assert problems(v2(searchSpace=None)) == {
        "searchSpace": "required: the search space, a mapping of names to {_type, _value} (give "
        "searchSpace, or searchSpaceFile with `det experiment create`)"
    }
    assert problems(v2(searchSpace=None, searchSpaceFile="space.json")) == {
        "searchSpaceFile": "the API cannot read files: send the search space inline as searchSpace "
        "(`det experiment create` does this)"
    }
    assert "useAnnotation" in problems(v2(searchSpace=None, useAnnotation=True))
    v1 = load(V1)
    assert list(problems(v1)) == ["searchSpacePath"]
    del v1["searchSpacePath"]
    assert list(problems(v1)) == ["searchSpacePath"]


def test_a_search_space_must_be_a_mapping() -> None:
    assert problems(v2(searchSpace=[1, 2])) == {
        "searchSpace": "must be a mapping of names to {_type, _value}"
    }


def test_search_space_and_file_together_is_a_problem() -> None:
    assert "searchSpaceFile" in problems(v2(searchSpaceFile="space.json"))


def test_an_empty_search_space_is_allowed() -> None:
    assert translate(v2(searchSpace={})).config["hyperparameters"] == {}


# --- tuner -> searcher ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tuner", "searcher", "warning"),
    [
        ("TPE", "tpe", None),
        ("tpe", "tpe", None),
        ("Random", "random", None),
        ("RandomSearch", "random", None),
        ("GridSearch", "grid", None),
        ("Grid_Search", "grid", None),
        ("Anneal", "tpe", "the Anneal tuner is not available in Stratus; using the tpe searcher"),
        ("Evolution", "tpe", "the Evolution tuner is not available in Stratus; using the tpe searcher"),
        ("SMAC", "tpe", "the SMAC tuner is not available in Stratus; using the tpe searcher"),
        ("MetisTuner", "tpe", "the MetisTuner tuner is not available in Stratus; using the tpe searcher"),
        ("GPTuner", "tpe", "the GPTuner tuner is not available in Stratus; using the tpe searcher"),
        ("DNGOTuner", "tpe", "the DNGOTuner tuner is not available in Stratus; using the tpe searcher"),
        ("Hyperband", "hyperband", None),
        ("BOHB", "bohb", None),
        ("MyOwnTuner", "tpe", "the MyOwnTuner tuner is not available in Stratus; using the tpe searcher"),
    ],
)
def test_tuner_mapping(tuner: str, searcher: str, warning: str | None) -> None:
    translation = translate(v2(tuner={"name": tuner, "classArgs": {"optimize_mode": "maximize"}}))

    assert translation.config["searcher"]["name"] == searcher
    assert translation.config["data"]["nni"]["tuner"] == tuner
    tuner_warnings = warnings_about(translation, "tuner.name")
    if searcher == "tpe" and tuner.lower() != "tpe":
        assert len(tuner_warnings) == 1 and tuner in tuner_warnings[0]
    if warning is not None:
        assert tuner_warnings == [f"tuner.name: {warning}"]
    if searcher != "tpe" or tuner.lower() == "tpe":
        assert tuner_warnings == []


def pbt(max_trials: int | None = 4, **class_args: Any) -> dict[str, Any]:
    """A v2 config with PBTTuner (`class_args` added to optimize_mode: maximize)."""
    return v2(
        maxTrialNumber=max_trials,
        tuner={"name": "PBTTuner", "classArgs": {"optimize_mode": "maximize", **class_args}},
    )


def test_pbt_tuner_runs_as_the_pbt_searcher_with_nnis_defaults() -> None:
    translation = translate(
        v2(maxTrialNumber=100, tuner={"name": "PBTTuner", "classArgs": {"optimize_mode": "maximize"}})
    )

    assert translation.config["searcher"] == {
        "name": "pbt",
        "metric": "default",
        "smaller_is_better": False,
        "population_size": 10,  # NNI's defaults
        "num_rounds": 10,  # maxTrialNumber / population_size: each NNI step uses population_size trials
        "length_per_round": {"epochs": 1},  # one run of the trial command, completed by the nni stand-in
        "replace_function": {"truncate_fraction": 0.2},
        "explore_function": {"resample_probability": 0.25, "perturb_factor": 0.2},
    }
    assert translation.config["data"]["nni"]["tuner"] == "PBTTuner"
    (said,) = warnings_about(translation, "tuner.name")
    assert "10 rounds of 10 members" in said and "same trial" in said
    assert "not used with PBTTuner" in warnings_about(translation, "trialConcurrency")[0]
    assert warnings_about(translation, "tuner.classArgs") == []


def test_pbt_class_args_map_to_the_searchers_settings() -> None:
    translation = translate(
        pbt(
            max_trials=7,
            population_size=2,
            factors=0.3,  # the spelling of NNI's classArgs validator
            resample_probability=0.5,
            fraction=0.2,
            all_checkpoint_dir="/nfs/ckpt",
        )
    )

    searcher = translation.config["searcher"]
    assert (searcher["population_size"], searcher["num_rounds"]) == (2, 3)
    assert searcher["explore_function"] == {"resample_probability": 0.5, "perturb_factor": 0.3}
    # NNI replaces ceil(0.2 * 2) = 1 member a step; so does the searcher (int(fraction * 2) = 1).
    assert int(searcher["replace_function"]["truncate_fraction"] * 2) == 1
    assert (
        "ignored (checkpoints live in the platform's storage"
        in warnings_about(translation, "tuner.classArgs.all_checkpoint_dir")[0]
    )
    (partial,) = warnings_about(translation, "maxTrialNumber")
    assert "7 is not a whole number of rounds of 2" in partial and "3 rounds" in partial
    assert (
        translate(pbt(max_trials=20, factor=0.1, factors=0.9)).config["searcher"]["explore_function"][
            "perturb_factor"
        ]
        == 0.1
    )


@pytest.mark.parametrize(
    ("population", "fraction", "replaced"), [(10, 0.2, 2), (3, 0.2, 1), (49, 0.02, 1), (7, 0.5, 3)]
)
def test_pbt_replaces_as_many_members_as_nni(population: int, fraction: float, replaced: int) -> None:
    searcher = translate(pbt(max_trials=population, population_size=population, fraction=fraction)).config[
        "searcher"
    ]
    assert int(searcher["replace_function"]["truncate_fraction"] * population) == replaced


def test_pbt_without_a_number_of_rounds_is_refused() -> None:
    assert problems(pbt(max_trials=None)) == {
        "maxTrialNumber": "required with PBTTuner: Stratus' pbt searcher runs a set number of rounds of "
        "population_size trials; set maxTrialNumber to population_size (10) times the number of rounds"
    }
    assert "must be at least population_size (10)" in problems(pbt(max_trials=8))["maxTrialNumber"]
    assert problems(pbt(max_trials=20, factor=1.5)) == {
        "tuner.classArgs.factor": "must be a number between 0 and 1, got 1.5"
    }
    assert "population_size" in " ".join(problems(pbt(population_size=0)))


def test_v1_tuner_and_advisor_names() -> None:
    raw = load(V1)
    raw["searchSpace"] = SEARCH_SPACE
    raw["tuner"] = {"builtinTunerName": "Random"}
    assert translate(raw).config["searcher"]["name"] == "random"

    raw["advisor"] = {"builtinAdvisorName": "BOHB", "classArgs": {"optimize_mode": "maximize"}}
    translation = translate(raw)

    assert translation.config["searcher"]["name"] == "bohb"
    assert translation.config["data"]["nni"]["tuner"] == "BOHB"
    assert "tuner: ignored (the advisor is used instead, as NNI does)" in translation.warnings
    assert not warnings_about(translation, "advisor.builtinAdvisorName")


def test_hyperband_and_bohb_class_args_become_their_searchers_settings() -> None:
    hyperband = translate(
        v2(advisor={"name": "Hyperband", "classArgs": {"R": 100, "eta": 3, "optimize_mode": "maximize"}})
    )
    assert hyperband.config["searcher"] == {
        "name": "hyperband",
        "metric": "default",
        "smaller_is_better": False,
        "max_length": {"batches": 100},
        "divisor": 3.0,
        **{k: hyperband.config["searcher"][k] for k in ("max_trials", "max_concurrent_trials")},
    }
    assert not warnings_about(hyperband, "advisor.classArgs")
    args = {"min_budget": 3, "max_budget": 27, "eta": 3, "top_n_percent": 20, "random_fraction": 0.2}
    bohb = translate(v2(advisor={"name": "BOHB", "classArgs": {**args, "optimize_mode": "minimize"}}))
    searcher = bohb.config["searcher"]
    assert searcher["max_length"] == {"batches": 27} and searcher["max_rungs"] == 3  # budgets 3, 9, 27
    assert (searcher["top_n_percent"], searcher["random_fraction"], searcher["num_samples"]) == (20, 0.2, 64)
    defaults = translate(v2(advisor={"name": "BOHB", "classArgs": {"optimize_mode": "minimize"}}))
    assert defaults.config["searcher"]["max_length"] == {"batches": 3}  # NNI's max_budget default
    serial = translate(v2(advisor={"name": "Hyperband", "classArgs": {"exec_mode": "serial"}}))
    assert warnings_about(serial, "advisor.classArgs.exec_mode")
    assert "advisor.classArgs.eta" in problems(v2(advisor={"name": "Hyperband", "classArgs": {"eta": 1}}))
    assert "advisor.classArgs.R" in problems(v2(advisor={"name": "Hyperband", "classArgs": {"R": "big"}}))


def test_custom_and_missing_tuners() -> None:
    custom = translate(v2(tuner={"className": "my_tuner.MyTuner", "codeDirectory": "tuners"}))
    none = translate(v2(tuner=None))

    assert custom.config["searcher"]["name"] == "tpe"
    assert (
        "tuner: the custom tuner my_tuner.MyTuner cannot run on Stratus; using the tpe searcher"
        in custom.warnings
    )
    assert none.config["searcher"]["name"] == "random"
    assert "tuner: no tuner given; using the random searcher" in none.warnings
    assert none.config["data"]["nni"]["tuner"] is None


def test_optimize_mode() -> None:
    maximize = translate(v2(tuner={"name": "TPE", "classArgs": {"optimize_mode": "maximize"}}))
    minimize = translate(v2(tuner={"name": "TPE", "classArgs": {"optimize_mode": "minimize"}}))
    unset = translate(v2(tuner={"name": "Random"}))

    assert maximize.config["searcher"]["smaller_is_better"] is False
    assert minimize.config["searcher"]["smaller_is_better"] is True
    assert unset.config["searcher"]["smaller_is_better"] is True
    assert warnings_about(unset, "tuner.classArgs.optimize_mode") == [
        "tuner.classArgs.optimize_mode: not set; Stratus assumes minimize (a smaller `default` metric "
        "is better); set optimize_mode: maximize if larger is better"
    ]
    bad = problems(v2(tuner={"name": "TPE", "classArgs": {"optimize_mode": "max"}}))
    assert bad == {"tuner.classArgs.optimize_mode": "must be maximize or minimize"}


def test_seed_becomes_the_experiment_seed_and_other_class_args_warn() -> None:
    args = {"optimize_mode": "maximize", "seed": 7, "parallel_optimize": True, "constant_liar_type": "min"}

    translation = translate(v2(tuner={"name": "TPE", "classArgs": args}))

    assert translation.config["reproducibility"] == {"experiment_seed": 7}
    assert warnings_about(translation, "tuner.classArgs.parallel_optimize") == [
        "tuner.classArgs.parallel_optimize: ignored (no equivalent in Stratus' tpe searcher)"
    ]
    assert warnings_about(translation, "tuner.classArgs.constant_liar_type") != []
    negative = translate(v2(tuner={"name": "Random", "classArgs": {"seed": -1}}))
    assert "reproducibility" not in negative.config
    assert warnings_about(negative, "tuner.classArgs.seed") != []


def test_grid_search_counts_axes_and_ignores_max_trials() -> None:
    space = {
        "opt": {"_type": "choice", "_value": ["adam", "sgd"]},
        "layers": {"_type": "randint", "_value": [1, 4]},
        "units": {"_type": "randint", "_value": [1, 100]},
        "dropout": {"_type": "uniform", "_value": [0, 0.5]},
        "lr": {"_type": "loguniform", "_value": [0.001, 0.1]},
        "step": {"_type": "quniform", "_value": [0, 1, 0.25]},
    }

    translation = translate(v2(searchSpace=space, tuner={"name": "GridSearch"}))

    hps = translation.config["hyperparameters"]
    assert hps["opt"] == {"type": "categorical", "vals": ["adam", "sgd"]}
    assert hps["layers"] == {"type": "int", "minval": 1, "maxval": 3, "count": 3}
    assert hps["units"]["count"] == GRID_INT_LIMIT
    assert hps["dropout"]["count"] == GRID_COUNT and hps["lr"]["count"] == GRID_COUNT
    assert hps["step"] == {"type": "categorical", "vals": [0.0, 0.25, 0.5, 0.75, 1.0]}
    assert translation.config["searcher"] == {
        "name": "grid",
        "metric": "default",
        "smaller_is_better": True,
        "max_concurrent_trials": 2,
    }
    expected = {
        "searchSpace.layers": [],
        "searchSpace.units": [
            "searchSpace.units: GridSearch: 99 integers; the grid takes 10 evenly spaced ones (use choice "
            "for an exact grid)"
        ],
        "searchSpace.dropout": [
            "searchSpace.dropout: GridSearch: a continuous range; the grid takes 5 evenly spaced values "
            "(use choice or quniform for an exact grid)"
        ],
        "maxTrialNumber": [
            "maxTrialNumber: ignored with GridSearch: the grid searcher runs every grid point once"
        ],
    }
    assert {path: warnings_about(translation, path) for path in expected} == expected


def test_batch_tuner_runs_as_a_grid() -> None:
    space = {"combine_params": {"_type": "choice", "_value": [{"optimizer": "Adam"}, {"optimizer": "SGD"}]}}

    translation = translate(v2(searchSpace=space, tuner={"name": "BatchTuner"}, maxTrialNumber=None))

    assert translation.config["searcher"]["name"] == "grid"
    assert (
        translation.config["hyperparameters"]["combine_params"]["vals"] == space["combine_params"]["_value"]
    )
    assert len(warnings_about(translation, "tuner.name")) == 1


# --- trials, concurrency, resources ---------------------------------------------------------------


def test_without_max_trials_tpe_and_random_run_until_stopped() -> None:
    for tuner in ("TPE", "Random"):
        translation = translate(v2(maxTrialNumber=None, tuner={"name": tuner}))
        searcher = translation.config["searcher"]
        assert searcher["until_stopped"] is True and "max_trials" not in searcher
        assert searcher["max_concurrent_trials"] == 2  # trialConcurrency
        assert warnings_about(translation, "maxTrialNumber") == [
            "maxTrialNumber: not set: as in NNI, trials are created (trialConcurrency at a time) until "
            "the experiment is stopped with `det experiment cancel` or `det experiment kill`"
        ]
        parsed = parse_experiment_config(translation.config).config
        assert isinstance(parsed.searcher, cfg.RandomSearcher | cfg.TPESearcher)
        assert parsed.searcher.until_stopped and parsed.searcher.max_trials is None


def test_max_trials_is_checked() -> None:
    assert problems(v2(maxTrialNumber=0)) == {
        "maxTrialNumber": "must be a whole number of trials (1 or more)"
    }
    assert problems(v2(trialConcurrency="2")) == {
        "trialConcurrency": "must be a whole number of trials (1 or more)"
    }


def test_missing_concurrency_keeps_the_default_with_a_warning() -> None:
    translation = translate(v2(trialConcurrency=None))

    assert "max_concurrent_trials" not in translation.config["searcher"]
    assert warnings_about(translation, "trialConcurrency") == [
        "trialConcurrency: not set; Stratus runs up to 16 trials at once"
    ]


@pytest.mark.parametrize(
    ("gpus", "slots", "note"), [(None, 1, False), (0, 1, True), (1, 1, False), (4, 4, False)]
)
def test_gpus_become_slots(gpus: int | None, slots: int, note: bool) -> None:
    translation = translate(v2(trialGpuNumber=gpus))

    assert translation.config["resources"] == {"slots_per_trial": slots}
    assert bool(warnings_about(translation, "trialGpuNumber")) is note


def test_command_is_required() -> None:
    assert problems(v2(trialCommand=None)) == {
        "trialCommand": "required: the command that runs one trial, e.g. python3 mnist.py"
    }
    v1 = load(V1)
    del v1["trial"]["command"]
    v1["searchSpace"] = SEARCH_SPACE
    assert problems(v1) == {
        "trial.command": "required: the command that runs one trial, e.g. python3 mnist.py"
    }


def test_problems_are_reported_together() -> None:
    found = problems(v2(trialCommand=None, maxTrialNumber=0, searchSpace={"x": {"_type": "uniform"}}))

    assert set(found) == {"trialCommand", "maxTrialNumber", "searchSpace.x._value"}


def test_v1_trial_image_becomes_the_environment_image_and_other_trial_keys_warn() -> None:
    raw = load(V1)
    raw["searchSpace"] = SEARCH_SPACE
    raw["trial"].update({"image": "msranni/nni:latest", "cpuNum": 2, "memoryMB": 8192})

    translation = translate(raw)

    assert translation.config["environment"] == {"image": "msranni/nni:latest"}
    assert [w.split(":")[0] for w in translation.warnings if w.startswith("trial.")] == [
        "trial.gpuNum",
        "trial.cpuNum",
        "trial.memoryMB",
    ]


# --- fields without equivalent ----------------------------------------------------------------------


V2_IGNORED = {
    "maxTrialDuration": "30m",
    "trainingService": {"platform": "remote", "machineList": [{"host": "1.2.3.4", "user": "a"}]},
    "nniManagerIp": "10.0.0.1",
    "useAnnotation": True,
    "debug": True,
    "logLevel": "debug",
    "experimentWorkingDirectory": "~/nni-experiments",
    "tunerGpuIndices": [0],
    "sharedStorage": {"storageType": "NFS"},
    "experimentType": "hpo",
}
V1_IGNORED = {
    "authorName": "alice",
    "maxTrialDuration": "30m",
    "trainingServicePlatform": "local",
    "nniManagerIp": "10.0.0.1",
    "useAnnotation": True,
    "debug": True,
    "logLevel": "info",
    "logDir": "/tmp/nni",
    "logCollection": "http",
    "multiThread": True,
    "versionCheck": False,
    "localConfig": {"gpuIndices": "0", "useActiveGpu": True},
    "machineList": [{"ip": "1.2.3.4", "username": "a", "passwd": "b"}],
    "paiConfig": {"userName": "a", "host": "pai"},
    "kubeflowConfig": {"operator": "tf-operator"},
}


@pytest.mark.parametrize(("field", "value"), V2_IGNORED.items())
def test_every_v2_field_without_equivalent_warns(field: str, value: Any) -> None:
    translation = translate(v2(**{field: value}))

    found = warnings_about(translation, field)
    assert len(found) == 1 and found[0].startswith(f"{field}: ignored (")


@pytest.mark.parametrize(("field", "value"), V1_IGNORED.items())
def test_every_v1_field_without_equivalent_warns(field: str, value: Any) -> None:
    raw = load(V1)
    raw["searchSpace"] = SEARCH_SPACE
    raw[field] = value

    translation = translate(raw)

    found = warnings_about(translation, field)
    assert len(found) == 1 and found[0].startswith(f"{field}: ignored (")


@pytest.mark.parametrize(
    ("field", "value"),
    [("useAnnotation", False), ("debug", False), ("multiThread", False), ("versionCheck", True)],
)
def test_a_field_at_nnis_default_asks_for_nothing_and_is_not_warned_about(field: str, value: Any) -> None:
    raw = load(V1)
    raw["searchSpace"] = SEARCH_SPACE
    raw[field] = value

    assert warnings_about(translate(raw), field) == []
    assert warnings_about(translate(raw | {field: not value}), field) != []  # the other value is


def test_all_ignored_fields_at_once_each_warn_once() -> None:
    translation = translate(v2(**V2_IGNORED))

    named = [w.split(":")[0] for w in translation.warnings]
    assert sorted(set(named) & set(V2_IGNORED)) == sorted(V2_IGNORED)
    assert len(named) == len(set(named))


def test_tuner_and_assessor_extras_warn() -> None:
    tuner = {"name": "TPE", "classArgs": {"optimize_mode": "maximize"}, "gpuIndices": "0"}
    assessor = {"name": "Curvefitting", "classArgs": {"epoch_num": 20, "threshold": 0.9}}

    translation = translate(v2(tuner=tuner, assessor=assessor))

    assert warnings_about(translation, "tuner.gpuIndices") == [
        "tuner.gpuIndices: ignored (the searcher runs in the control plane, on no GPU)"
    ]
    assert warnings_about(translation, "assessor") == [
        "assessor: ignored (Stratus has no assessor, so the Curvefitting assessor stops no trial early; "
        "for early stopping, use Stratus' adaptive_asha searcher instead)"
    ]
    assert translation.config["data"]["nni"] == {"version": 2, "tuner": "TPE", "assessor": "Curvefitting"}
    custom = translate(v2(assessor={"className": "my.Assessor", "codeDirectory": "."}))
    assert warnings_about(custom, "assessor")[0].startswith(
        "assessor: ignored (Stratus has no assessor, so the my.Assessor"
    )


def test_unknown_keys_warn_and_nulls_are_unset() -> None:
    translation = translate(v2(maxTrialNumbr=10, nniManagerIp=None))

    assert warnings_about(translation, "maxTrialNumbr") == [
        "maxTrialNumbr: ignored (not a field of NNI's v2 config)"
    ]
    assert warnings_about(translation, "nniManagerIp") == []


def test_the_code_directory_is_the_clis_business_and_not_warned_about() -> None:
    translation = translate(v2(trialCodeDirectory="src"))

    assert warnings_about(translation, "trialCodeDirectory") == []


def test_stratus_sections_pass_through_and_win() -> None:
    raw = v2(
        trialGpuNumber=2,
        resources={"resource_pool": "gpu", "slots_per_trial": 4},
        environment={"image": "pytorch:2"},
        description="from NNI",
        max_restarts=2,
        data={"dataset": "mnist", "nni": "overwritten"},
        debug=True,
    )

    translation = translate(raw)

    config = translation.config
    assert config["resources"] == {"slots_per_trial": 4, "resource_pool": "gpu"}
    assert config["environment"] == {"image": "pytorch:2"}
    assert config["description"] == "from NNI" and config["max_restarts"] == 2
    assert config["data"] == {"dataset": "mnist", "nni": {"version": 2, "tuner": "TPE"}}
    assert "debug" not in config
    assert warnings_about(translation, "resources.slots_per_trial") == [
        "resources.slots_per_trial: overrides trialGpuNumber (given both)"
    ]
    assert warnings_about(translation, "debug") == [
        "debug: ignored (NNI's debug mode has no Stratus equivalent)"
    ]


# --- recognising NNI configs -------------------------------------------------------------------------


DETERMINED_CONFIGS = [
    "name: mnist\nentrypoint: python3 train.py\nsearcher: {name: single, metric: loss}\n",
    "entrypoint: model_def:Trial\nhyperparameters: {lr: 0.1}\nsearcher: {name: random, metric: l, max_trials: 2}\n",
    "searcher: {name: grid, metric: l}\nhyperparameters: {x: {type: int, minval: 1, maxval: 3, count: 3}}\n",
    "name: x\ndescription: y\nresources: {slots_per_trial: 2}\ndebug: true\nlabels: [a]\n",
    "entrypoint: python3 train.py\nsearcher: {name: single, metric: l}\ntrialCommand: python3 x.py\n",
    "entrypoint: python3 train.py\nsearcher: {name: single, metric: l}\ntrial: {command: x}\n",
    "{}",
]


@pytest.mark.parametrize("text", DETERMINED_CONFIGS)
def test_determined_configs_are_not_nni(text: str) -> None:
    assert is_nni_config(load(text)) is False


def test_the_repositorys_determined_configs_are_not_nni() -> None:
    root = Path(__file__).resolve().parents[4]
    paths = sorted((root / "examples").rglob("*.yaml"))
    assert paths
    for path in paths:
        assert is_nni_config(yaml.safe_load(path.read_text())) is False, path


@pytest.mark.parametrize("value", [None, [], "trialCommand: x", 3])
def test_non_mappings_are_not_nni(value: Any) -> None:
    assert is_nni_config(value) is False


@pytest.mark.parametrize(
    ("raw", "version"),
    [
        ({"trialCommand": "python3 x.py"}, 2),
        ({"searchSpaceFile": "s.json"}, 2),
        ({"experimentName": "x", "tuner": {"name": "TPE"}}, 2),
        ({"trial": {"command": "python3 x.py", "codeDir": "."}}, 1),
        ({"authorName": "a"}, 1),
        ({"searchSpacePath": "s.json", "maxTrialNum": 3}, 1),
    ],
)
def test_nni_configs_are_recognised_with_their_version(raw: dict[str, Any], version: int) -> None:
    assert is_nni_config(raw) is True
    assert nni_config_version(raw) == version


# --- validate(): where configs enter the control plane -----------------------------------------------


@pytest.fixture
def any_searcher(monkeypatch: pytest.MonkeyPatch) -> None:
    """validate() also builds the searcher; which searchers can run is not this file's subject."""
    monkeypatch.setattr(experiments, "new_searcher", lambda spec: None)


@pytest.mark.usefixtures("any_searcher")
def test_validate_translates_nni_configs_and_appends_the_warnings() -> None:
    raw = load(V2_FILE)
    raw["searchSpace"] = SEARCH_SPACE
    del raw["searchSpaceFile"]
    raw["checkpoint_storage"] = {"access_key": "AKIA..."}

    parsed = experiments.validate(raw)

    assert isinstance(parsed, cfg.ParsedConfig)
    assert parsed.config.searcher.name == "tpe"
    assert parsed.config.data["nni"] == {"version": 2, "tuner": "TPE", "max_experiment_duration_s": 86400}
    assert parsed.warnings[0].startswith("checkpoint_storage.access_key: ignored and not stored")
    assert [w.split(":")[0] for w in parsed.warnings[1:]] == ["maxExperimentDuration", "trainingService"]


@pytest.mark.usefixtures("any_searcher")
def test_validate_reports_nni_problems_as_config_errors() -> None:
    with pytest.raises(cfg.ConfigInvalidError) as info:
        experiments.validate(load(V2_FILE))

    assert (info.value.status, info.value.body()["error"]) == (400, "ConfigInvalid")
    assert info.value.details["problems"] == [
        {
            "path": "searchSpaceFile",
            "message": "the API cannot read files: send the search space inline as searchSpace "
            "(`det experiment create` does this)",
        }
    ]


@pytest.mark.usefixtures("any_searcher")
def test_validate_leaves_determined_configs_alone() -> None:
    parsed = experiments.validate(load(DETERMINED_CONFIGS[0]))

    assert parsed.config.name == "mnist" and parsed.warnings == []


@pytest.mark.parametrize(
    ("value", "seconds"), [("1h", 3600), ("30m", 1800), ("1.5h", 5400), ("2d", 172800), (90, 90), ("45s", 45)]
)
def test_the_experiment_duration_is_checked_and_recorded(value: Any, seconds: int) -> None:
    v2_translation = translate(v2(maxExperimentDuration=value))
    raw = load(V1)
    raw["searchSpace"] = SEARCH_SPACE
    raw["maxExecDuration"] = value
    v1_translation = translate(raw)

    for translation, key in ((v2_translation, "maxExperimentDuration"), (v1_translation, "maxExecDuration")):
        assert translation.config["data"]["nni"]["max_experiment_duration_s"] == seconds
        assert len(warnings_about(translation, key)) == 1


@pytest.mark.parametrize("value", ["soon", "-1h", 0, True, "1w", [1]])
def test_a_malformed_experiment_duration_is_refused(value: Any) -> None:
    assert problems(v2(maxExperimentDuration=value)) == {
        "maxExperimentDuration": 'must be a duration like "30m", "2h" or "1d" (or a number of seconds)'
    }


# --- v2 field names in any case, with or without underscores (as NNI reads them) -----------------


SNAKE_CASE = """\
experiment_name: snake
search_space:
  hidden_units:
    _type: choice
    _value: [32, 64]
trial_command: python3 fit.py
trial_code_directory: .
trial_concurrency: 3
max_trial_number: 6
TrialGpuNumber: 0
tuner:
  name: Random
  class_args:
    optimize_mode: maximize
training_service:
  platform: local
"""


def test_v2_field_names_are_read_ignoring_case_and_underscores() -> None:
    raw = load(SNAKE_CASE)
    assert is_nni_config(raw) and nni_config_version(raw) == 2

    translation = translate_nni(raw)  # the search space comes from the config's own search_space

    config = parse_experiment_config(translation.config).config
    assert config.name == "snake" and config.entrypoint == "python3 fit.py"
    assert config.searcher.name == "random" and config.searcher.smaller_is_better is False
    assert (config.searcher.max_trials, config.searcher.max_concurrent_trials) == (6, 3)
    assert list(config.hyperparameters) == ["hidden_units"]  # the search space's own names are kept
    assert [w.split(":")[0] for w in translation.warnings] == ["trialGpuNumber", "trainingService"]


def test_a_v2_field_given_in_two_spellings_is_a_problem() -> None:
    assert problems(v2(trial_command="python3 other.py")) == {
        "trial_command": "is trialCommand, given twice (NNI ignores case and underscores); keep one"
    }


def test_a_custom_tuner_with_a_search_space_of_its_own_is_refused_naming_the_tuner_first() -> None:
    raw = v2(
        tuner={
            "className": "ShapeTuner",
            "codeDirectory": "tuners",
            "classArgs": {"optimize_mode": "maximize"},
        },
        searchSpace={"tile": {"_type": "factor", "_value": [64, 2]}},
    )

    found = problems(raw)

    assert list(found) == ["tuner.className", "searchSpace.tile._type"]
    assert found["tuner.className"] == (
        "the custom tuner ShapeTuner cannot run on Stratus, so its search space must be NNI's standard one "
        "({_type, _value} entries), searched by Stratus' tpe searcher"
    )
