"""`det` with NNI experiment configs, against the fake API of tests/unit/det/fakes.py.

The CLI reads the search-space file and sends it inline, packs the trial code folder when no CONTEXT
is given, prints the API's warnings, and shows NNI's trial statuses for experiments imported from NNI.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from chalicelib.domain.states import TrialState
from det._config import inline_nni_search_space, load_config, nni_code_directory
from det._trial import NNI_STATUSES, nni_status
from det.errors import ConfigFileError
from stratus.contract.nni import is_nni_config

SEARCH_SPACE = {
    "lr": {"_type": "loguniform", "_value": [0.0001, 0.1]},
    "batch_size": {"_type": "choice", "_value": [16, 32, 64]},
}

V2 = """\
experimentName: MNIST
searchSpaceFile: search_space.json
trialCommand: python3 mnist.py
trialCodeDirectory: code
trialGpuNumber: 0
trialConcurrency: 2
maxTrialNumber: 10
maxExperimentDuration: 1h
tuner:
  name: TPE
  classArgs:
    optimize_mode: maximize
trainingService:
  platform: local
"""

V1 = """\
authorName: alice
experimentName: mnist_v1
trialConcurrency: 1
maxTrialNum: 4
trainingServicePlatform: local
searchSpacePath: spaces/search_space.json
tuner:
  builtinTunerName: Random
trial:
  command: python3 mnist.py
  codeDir: ../src
  gpuNum: 1
"""


@pytest.fixture
def api(api):  # the conftest's FakeApi
    """The fake API, answering creates with the warnings an NNI translation would give."""
    api.create_warnings = ["maxExperimentDuration: ignored (Stratus has no experiment time limit)"]
    return api


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """exp/config.yml (v2) with exp/search_space.json and the trial code in exp/code/."""
    folder = tmp_path / "exp"
    (folder / "code").mkdir(parents=True)
    (folder / "config.yml").write_text(V2)
    (folder / "search_space.json").write_text(json.dumps(SEARCH_SPACE))
    return folder / "config.yml"


# --- inlining the search space ------------------------------------------------------------------------


def test_create_sends_the_search_space_file_inline(
    api, project: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fake_pack
) -> None:
    monkeypatch.chdir(tmp_path)  # the file is found relative to the config, not the working folder
    ctx = project.parent / "code"

    result = api.run("e", "create", str(project), str(ctx))

    assert result.code == 0, result.err
    validate, submit = api.bodies("POST", "/experiments")
    for body in (validate, submit):
        assert body["config"]["searchSpace"] == SEARCH_SPACE
        assert "searchSpaceFile" not in body["config"]
        assert body["config"]["trialCommand"] == "python3 mnist.py"  # the API translates the rest
    assert submit["context_sha256"] == fake_pack(ctx, []).sha256


def test_create_inlines_a_v1_search_space_path(api, tmp_path: Path) -> None:
    folder = tmp_path / "exp"
    (folder / "spaces").mkdir(parents=True)
    (folder / "spaces" / "search_space.json").write_text(json.dumps(SEARCH_SPACE))
    config = folder / "config.yml"
    config.write_text(V1)
    (tmp_path / "src").mkdir()

    result = api.run("e", "create", str(config), str(tmp_path / "src"))

    assert result.code == 0, result.err
    sent = api.bodies("POST", "/experiments")[-1]["config"]
    assert sent["searchSpace"] == SEARCH_SPACE
    assert "searchSpacePath" not in sent
    assert sent["trial"] == {"command": "python3 mnist.py", "codeDir": "../src", "gpuNum": 1}


def test_an_inline_search_space_is_sent_as_is(api, tmp_path: Path) -> None:
    config = tmp_path / "config.yml"
    config.write_text(
        "searchSpace:\n  x: {_type: uniform, _value: [0, 1]}\ntrialCommand: python3 t.py\n"
        "trialConcurrency: 1\nmaxTrialNumber: 2\n"
    )

    result = api.run("e", "create", str(config), str(tmp_path))

    assert result.code == 0, result.err
    assert api.bodies("POST", "/experiments")[-1]["config"]["searchSpace"] == {
        "x": {"_type": "uniform", "_value": [0, 1]}
    }


def test_a_missing_search_space_file_stops_before_the_api(api, project: Path) -> None:
    (project.parent / "search_space.json").unlink()

    result = api.run("e", "create", str(project))

    assert result.code == 2
    assert result.err == (
        f"Error: search space file {project.parent / 'search_space.json'} (searchSpaceFile in "
        f"{project}) does not exist; fix the path (it is relative to the config file)\n"
    )
    assert api.requests == []


def test_a_broken_search_space_file_names_line_and_column(api, project: Path) -> None:
    (project.parent / "search_space.json").write_text('{\n  "lr": {"_type": "uniform",, }\n}\n')

    result = api.run("e", "create", str(project))

    assert result.code == 2
    assert result.err.startswith(
        f"Error: search space file {project.parent / 'search_space.json'}, line 2, column"
    )
    assert api.requests == []


def test_a_search_space_file_must_hold_a_mapping(tmp_path: Path) -> None:
    (tmp_path / "space.json").write_text("[1, 2]")
    config: dict[str, Any] = {"trialCommand": "x", "searchSpaceFile": "space.json"}

    with pytest.raises(ConfigFileError, match="holds a list; a search space is a mapping"):
        inline_nni_search_space(config, tmp_path / "config.yml")


def test_a_yaml_search_space_file_is_read_too(tmp_path: Path) -> None:
    (tmp_path / "space.yml").write_text("lr:\n  _type: uniform\n  _value: [0, 1]\n")
    config: dict[str, Any] = {"trialCommand": "x", "searchSpaceFile": "space.yml"}

    inline_nni_search_space(config, tmp_path / "config.yml")

    assert config == {"trialCommand": "x", "searchSpace": {"lr": {"_type": "uniform", "_value": [0, 1]}}}


def test_overrides_apply_after_inlining(project: Path) -> None:
    config = load_config(project, ["trialConcurrency=4", "searchSpace.lr._value=[0.001, 0.01]"])

    assert config["trialConcurrency"] == 4
    assert config["searchSpace"]["lr"] == {"_type": "loguniform", "_value": [0.001, 0.01]}


def test_a_determined_config_is_not_touched(tmp_path: Path) -> None:
    path = tmp_path / "const.yaml"
    path.write_text(
        "entrypoint: python3 train.py\nsearcher: {name: single, metric: loss}\nsearchSpaceFile: nope.json\n"
    )

    assert load_config(path)["searchSpaceFile"] == "nope.json"  # the API reports the unknown key


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"trialCommand": "x"}, True),
        ({"trial": {"command": "x"}}, True),
        ({"authorName": "a", "maxTrialNum": 1}, True),
        ({"entrypoint": "x", "searcher": {}}, False),
        ({"entrypoint": "x", "trialCommand": "y"}, False),
        ({"name": "x", "resources": {}}, False),
        ({}, False),
    ],
)
def test_the_cli_recognises_nni_configs_like_the_api(config: dict[str, Any], expected: bool) -> None:
    assert is_nni_config(config) is expected


# --- the trial code folder as the context ----------------------------------------------------------


def test_without_context_the_trial_code_directory_is_packed(api, project: Path, fake_pack) -> None:
    result = api.run("e", "create", str(project))

    assert result.code == 0, result.err
    assert api.packed == [project.parent / "code"]
    assert f"Using the NNI trial code directory {project.parent / 'code'} as the context" in result.err
    assert (
        api.bodies("POST", "/experiments")[-1]["context_sha256"]
        == fake_pack(project.parent / "code", []).sha256
    )


def test_an_explicit_context_wins_over_the_trial_code_directory(api, project: Path, tmp_path: Path) -> None:
    result = api.run("e", "create", str(project), str(tmp_path))

    assert result.code == 0, result.err
    assert api.packed == [tmp_path]
    assert "trial code directory" not in result.err


def test_v1_code_dir_and_v2_default_folder(tmp_path: Path) -> None:
    config = tmp_path / "exp" / "config.yml"

    assert (
        nni_code_directory({"trial": {"command": "x", "codeDir": "../src"}}, config)
        == tmp_path / "exp" / "../src"
    )
    assert nni_code_directory({"trialCommand": "x"}, config) == tmp_path / "exp"
    assert nni_code_directory({"trialCommand": "x", "trialCodeDirectory": "/abs/code"}, config) == Path(
        "/abs/code"
    )
    assert (
        nni_code_directory({"trialCommand": "x", "trialCodeDirectory": "~/code"}, config)
        == Path.home() / "code"
    )


def test_includes_work_with_the_trial_code_directory(api, project: Path, fake_pack) -> None:
    result = api.run("e", "create", str(project), "-i", "../data")

    assert result.code == 0, result.err
    assert api.bodies("POST", "/experiments")[-1]["context_sha256"] == (
        fake_pack(project.parent / "code", [Path("../data")]).sha256
    )


def test_the_apis_warnings_are_printed(api, project: Path) -> None:
    result = api.run("e", "create", str(project))

    assert result.code == 0
    assert result.out == "Created experiment 1\n"
    assert "Warning: maxExperimentDuration: ignored (Stratus has no experiment time limit)\n" in result.err


# --- NNI status in `det trial describe` ----------------------------------------------------------------


def _seed(api, *, nni: bool, **trial_fields: Any) -> None:
    config = {"data": {"nni": {"version": 2, "tuner": "TPE"}}} if nni else {"data": {}}
    api.experiments[1] = api.experiment(1, config=config)
    api.trials[5] = api.trial(5, 1, **trial_fields)


@pytest.mark.parametrize(
    ("state", "early_stopped", "status"),
    [
        ("QUEUED", None, "WAITING"),
        ("PULLING", None, "WAITING"),
        ("RUNNING", None, "RUNNING"),
        ("COMPLETED", None, "SUCCEEDED"),
        ("COMPLETED", False, "SUCCEEDED"),
        ("COMPLETED", True, "EARLY_STOPPED"),
        ("ERROR", None, "FAILED"),
        ("CANCELED", None, "USER_CANCELED"),
        ("PAUSED", None, "WAITING"),
        ("STOPPING_COMPLETED", None, "RUNNING"),
    ],
)
def test_trial_describe_shows_the_nni_status(
    api, state: str, early_stopped: bool | None, status: str, table_rows
) -> None:
    fields: dict[str, Any] = {"state": state}
    if early_stopped is not None:  # a missing field (older APIs) counts as false
        fields["early_stopped"] = early_stopped
    _seed(api, nni=True, **fields)

    result = api.run("t", "describe", "5")

    assert result.code == 0, result.err
    rows = table_rows(result.out)
    assert rows[0][:5] == ["Trial ID", "Experiment ID", "State", "NNI Status", "H-Params"]
    assert rows[1][2:4] == [state, status]
    assert "GET /experiments/1" in api.calls("GET")


def test_trial_describe_of_a_determined_experiment_has_no_nni_column(api, table_rows) -> None:
    _seed(api, nni=False, state="COMPLETED")

    result = api.run("t", "describe", "5")

    assert result.code == 0
    assert "NNI Status" not in result.out
    assert table_rows(result.out)[0][:4] == ["Trial ID", "Experiment ID", "State", "H-Params"]


def test_trial_describe_json_adds_nni_status_only_for_nni(api) -> None:
    _seed(api, nni=True, state="ERROR")
    nni = json.loads(api.run("t", "describe", "5", "--json").out)
    _seed(api, nni=False, state="ERROR")
    plain = json.loads(api.run("t", "describe", "5", "--json").out)

    assert nni["trial"]["nni_status"] == "FAILED"
    assert "nni_status" not in plain["trial"]


def test_trial_describe_without_its_experiment_still_works(api) -> None:
    api.trials[5] = api.trial(5, 9, state="RUNNING")  # experiment 9 is unknown to the API

    result = api.run("t", "describe", "5")

    assert result.code == 0, result.err
    assert "NNI Status" not in result.out


def test_every_stratus_trial_state_has_an_nni_status() -> None:
    states = [str(state) for state in TrialState]
    assert sorted(NNI_STATUSES) == sorted(states)
    assert nni_status({"state": "SOMETHING_NEW"}) == "UNKNOWN"
    assert nni_status({"state": "RUNNING", "early_stopped": True}) == "EARLY_STOPPED"


# --- the experiment's name ------------------------------------------------------------------------------


def test_an_unnamed_nni_config_is_named_after_its_folder(api, tmp_path: Path, monkeypatch) -> None:
    folder = tmp_path / "mnist-pytorch"
    folder.mkdir()
    (folder / "config.yml").write_text("trialCommand: python3 mnist.py\nsearchSpace: {}\n")
    (folder / "snake.yml").write_text("trial_command: python3 mnist.py\nexperiment_name: mine\n")
    monkeypatch.chdir(folder)

    result = api.run("e", "create", "config.yml")  # a relative path: the folder is still found

    assert result.code == 0, result.err
    assert api.bodies("POST", "/experiments")[-1]["config"]["experimentName"] == "mnist-pytorch"
    snake = {k.replace("_", "").lower(): v for k, v in load_config(folder / "snake.yml").items()}
    assert snake["experimentname"] == "mine"  # NNI ignores case and underscores: the name is kept


def test_a_named_nni_config_keeps_its_name_and_a_determined_config_gets_none(
    project: Path, tmp_path: Path
) -> None:
    assert load_config(project)["experimentName"] == "MNIST"
    path = tmp_path / "const.yaml"
    path.write_text("entrypoint: python3 train.py\nsearcher: {name: single, metric: loss}\n")
    assert "experimentName" not in load_config(path) and "name" not in load_config(path)
