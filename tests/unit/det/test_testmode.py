"""`det experiment create --test-mode` against the in-memory fake API, and the pieces of `--local
--test-mode` that need no process.

The tests never sleep: the fake API moves the world forward each time the CLI waits. Local test mode
running real processes is tested in tests/integration/test_cli_testmode_local.py.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import yaml

from det import _test_config

CONFIG = """\
name: mnist
entrypoint: python3 train.py
hyperparameters:
  global_batch_size: 32
  lr:
    type: log
    base: 10
    minval: -4
    maxval: -1
  layers:
    type: int
    minval: 2
    maxval: 8
  dropout:
    type: double
    minval: 0
    maxval: 0.5
  optimizer:
    type: categorical
    vals: [adam, sgd]
  arch:
    width:
      type: int
      minval: 16
      maxval: 64
    act: {type: const, val: relu}
searcher:
  name: adaptive_asha
  metric: validation_loss
  smaller_is_better: false
  max_trials: 16
  time_metric: batches
  max_time: 1000
min_validation_period:
  batches: 100
min_checkpoint_period:
  batches: 500
max_restarts: 5
records_per_epoch: 6000
"""


@pytest.fixture
def config_file(project_config) -> Path:
    return project_config("asha.yaml", CONFIG)


# --- the test config -----------------------------------------------------------------------------


TEST_HYPERPARAMETERS = {
    "global_batch_size": 32,
    "lr": {"type": "const", "val": 0.0001},
    "layers": {"type": "const", "val": 2},
    "dropout": {"type": "const", "val": 0.0},
    "optimizer": {"type": "const", "val": "adam"},
    "arch": {"width": {"type": "const", "val": 16}, "act": {"type": "const", "val": "relu"}},
}


def test_make_test_config_by_hand() -> None:
    config = yaml.safe_load(CONFIG)
    before = json.dumps(config, sort_keys=True)

    test = _test_config.make_test_config(config)

    assert test == {
        "name": "mnist (test mode)",
        "entrypoint": "python3 train.py",
        "hyperparameters": TEST_HYPERPARAMETERS,
        "searcher": {
            "name": "single",
            "metric": "validation_loss",
            "smaller_is_better": False,
            "max_length": {"batches": 1},
        },
        "max_restarts": 0,
        "scheduling_unit": 1,
        "records_per_epoch": 6000,
    }
    assert json.dumps(config, sort_keys=True) == before  # the original is left alone
    assert _test_config.hparam_values(test["hyperparameters"]) == {
        "global_batch_size": 32,
        "lr": 0.0001,
        "layers": 2,
        "dropout": 0.0,
        "optimizer": "adam",
        "arch": {"width": 16, "act": "relu"},
    }


def test_make_test_config_edges() -> None:
    config = {
        "entrypoint": ["python3", "train.py"],
        "searcher": {"name": "single", "metric": "loss", "max_length": {"epochs": 3}},
        "hyperparameters": {
            "two": {"type": "log", "base": 2, "minval": 3, "maxval": 5},
            "default_base": {"type": "log", "minval": 1, "maxval": 2},
            "nothing": None,
            "a_list": [1, 2],
            "dict_choice": {"type": "categorical", "vals": [{"a": 1}, {"a": 2}]},
        },
    }

    test = _test_config.make_test_config(config, default_name="const")

    assert test["name"] == "const (test mode)"
    assert test["searcher"] == {"name": "single", "metric": "loss", "max_length": {"batches": 1}}
    assert test["hyperparameters"] == {
        "two": {"type": "const", "val": 8.0},
        "default_base": {"type": "const", "val": 10.0},
        "nothing": None,
        "a_list": [1, 2],
        # a mapping value stays a constant (a bare mapping would read as a nested group)
        "dict_choice": {"type": "const", "val": {"a": 1}},
    }
    assert _test_config.hparam_values(test["hyperparameters"])["dict_choice"] == {"a": 1}


def test_a_broken_hyperparameter_is_a_usage_error() -> None:
    from det.errors import UsageError

    with pytest.raises(UsageError, match=r"hyperparameters\.g\.x of type categorical has no usable vals"):
        _test_config.hparam_values({"g": {"x": {"type": "categorical", "vals": []}}})
    with pytest.raises(UsageError, match="has type 'uniform', which is not one of const, int"):
        _test_config.hparam_values({"x": {"type": "uniform"}})


# --- remote test mode ----------------------------------------------------------------------------


def _script_test_trial(api, *, checkpoint: bool = True, training_metric: bool = True) -> None:
    """The trial appears, starts, trains, validates (and checkpoints), then the experiment completes."""

    def appear() -> None:
        api.trials[7] = api.trial(7, 1, state="QUEUED")

    def start() -> None:
        api.trials[7]["state"] = "RUNNING"
        api.log(7, "loading data", "training 1 batch")

    def train() -> None:
        api.trials[7]["total_batches"] = 1
        if training_metric:
            api.metrics[(7, "training")] = [
                {"group": "training", "steps_completed": 1, "metrics": {"loss": 2.3}}
            ]

    def validate() -> None:
        api.metrics[(7, "validation")] = [
            {"group": "validation", "steps_completed": 1, "metrics": {"validation_loss": 2.2}}
        ]
        api.log(7, "validated: validation_loss=2.2")
        if checkpoint:
            api.checkpoints[7] = [{"uuid": "c-1", "trial_id": 7, "steps_completed": 1, "state": "COMPLETED"}]

    def end() -> None:
        api.log(7, "done")
        api.trials[7]["state"] = "COMPLETED"
        api.trials[7]["exit"] = {"code": 0, "reason": "exited with code 0"}
        api.experiments[1]["state"] = "COMPLETED"

    api.events = [lambda: None, appear, start, train, validate, end]


def test_remote_test_mode_passes(api, config_file: Path, fake_pack) -> None:
    _script_test_trial(api)
    ctx = config_file.parent / "ctx"

    result = api.run("e", "create", "--test-mode", str(config_file), str(ctx))

    assert result.code == 0, result.err
    assert result.out == "Created test experiment 1\nTest experiment 1 passed\n"
    assert result.err.splitlines()[-4:] == [
        "[✓] scheduling",
        "[✓] training",
        "[✓] validation",
        "[✓] checkpointing",
    ]
    sha = fake_pack(ctx, []).sha256
    assert [c for c in api.calls() if not c.startswith("GET")] == [
        "POST /experiments",
        "POST /experiments",
        "POST /contexts",
        f"PUT /bucket/contexts/{sha}.tar.zst",
        "POST /experiments",
    ]
    original, validate_test, submit = api.bodies("POST", "/experiments")
    assert original["validate_only"] and original["config"]["searcher"]["name"] == "adaptive_asha"
    assert validate_test["validate_only"] and validate_test["config"] == submit["config"]
    assert submit["validate_only"] is False and submit["activate"] is True
    assert submit["context_sha256"] == sha
    assert submit["config"]["name"] == "mnist (test mode)"
    assert submit["config"]["searcher"]["max_length"] == {"batches": 1}
    assert submit["config"]["hyperparameters"] == TEST_HYPERPARAMETERS
    assert "GET /trials/7/logs" not in api.calls()  # the log is printed only on failure
    # once a step is checked it is not asked about again
    assert api.calls().count("GET /trials/7") == len(
        [r for r in api.requests if r[1] == "/trials/7/metrics" and r[2]["group"] == "validation"]
    )


def test_remote_test_mode_passes_without_a_checkpoint_with_a_warning(api, config_file: Path) -> None:
    _script_test_trial(api, checkpoint=False)  # a Core API script that saves none: Determined passes it

    result = api.run("e", "create", "-t", str(config_file), str(config_file.parent / "ctx"))

    assert result.code == 0, result.err
    assert result.out == "Created test experiment 1\nTest experiment 1 passed\n"
    assert result.err.splitlines()[-5:] == [
        "[✓] scheduling",
        "[✓] training",
        "[✓] validation",
        "[✗] checkpointing",
        "Warning: trial 7 saved no checkpoint, so checkpointing was not tested: a paused or preempted "
        "trial of this code starts over from its first batch (Determined's test mode passes such code too)",
    ]
    assert "GET /trials/7/logs" not in api.calls()


def test_remote_test_mode_without_a_validation_still_fails_and_prints_the_log(api, config_file: Path) -> None:
    _script_test_trial(api, checkpoint=False)
    validate = api.events[4]
    api.events[4] = lambda: (validate(), api.metrics.pop((7, "validation")))

    result = api.run("e", "create", "-t", str(config_file), str(config_file.parent / "ctx"))

    assert result.code == 1
    assert result.out == (
        "Created test experiment 1\n"
        "Test experiment 1 failed at validation: trial 7 reported no validation metric "
        "(experiment COMPLETED, trial COMPLETED, exit code 0: exited with code 0)\n"
        "Log of trial 7:\n"
        "loading data\n"
        "training 1 batch\n"
        "validated: validation_loss=2.2\n"
        "done\n"
    )
    assert "saved no checkpoint" not in result.err  # it failed: no warning on top


def test_the_test_experiment_is_created_archived_as_in_determined(api, config_file: Path) -> None:
    _script_test_trial(api)

    api.run("e", "create", "-t", str(config_file), str(config_file.parent / "ctx"))

    original, validate_test, submit = api.bodies("POST", "/experiments")
    assert submit["archived"] is True
    assert "archived" not in original and "archived" not in validate_test
    assert api.experiments[1]["archived"] is True


def test_remote_training_counts_without_a_training_metric(api, config_file: Path) -> None:
    _script_test_trial(api, training_metric=False)

    result = api.run("e", "create", "-t", str(config_file), str(config_file.parent / "ctx"))

    assert (result.code, result.out.splitlines()[-1]) == (0, "Test experiment 1 passed")


def test_remote_test_mode_fails_at_scheduling_when_no_trial_runs(api, config_file: Path) -> None:
    def error() -> None:
        api.experiments[1]["state"] = "ERROR"

    api.events = [lambda: None, error]

    result = api.run("e", "create", "-t", str(config_file))

    assert result.code == 1
    assert result.out == (
        "Created test experiment 1\n"
        "Test experiment 1 failed at scheduling: the experiment ended ERROR without creating a trial\n"
    )
    assert "[✗] scheduling" in result.err and "[✗] checkpointing" in result.err


def test_remote_test_mode_fails_when_the_experiment_errors_after_all_steps(api, config_file: Path) -> None:
    _script_test_trial(api)
    api.events[-1] = lambda: (
        api.trials[7].update(state="ERROR", exit={"code": 1, "reason": "exited with code 1"}),
        api.experiments[1].update(state="ERROR"),
    )

    result = api.run("e", "create", "-t", str(config_file), str(config_file.parent / "ctx"))

    assert result.code == 1
    assert result.out.splitlines()[1] == (
        "Test experiment 1 failed: experiment ERROR, trial ERROR, exit code 1: exited with code 1"
    )


def test_remote_test_mode_uploads_nothing_when_the_config_is_refused(api, config_file: Path) -> None:
    api.refuse_config = {"error": "InvalidConfig", "message": "bad config; fix it", "problems": []}

    result = api.run("e", "create", "-t", str(config_file), str(config_file.parent / "ctx"))

    assert (result.code, result.err) == (1, "Error: bad config; fix it\n")
    assert api.calls() == ["POST /experiments"]


def test_remote_test_mode_redraws_one_line_on_a_terminal(
    api, config_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "120")  # the status line is cut to the terminal's width

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    _script_test_trial(api)

    result = api.run("e", "create", "-t", str(config_file), str(config_file.parent / "ctx"), err=Tty())

    assert result.code == 0
    assert "[✓] scheduling  [ ] training  [ ] validation  [ ] checkpointing · trial 7 RUNNING" in result.err
    assert result.err.endswith("\r\x1b[2K[✓] scheduling  [✓] training  [✓] validation  [✓] checkpointing\n")
    assert "\x1b" not in result.out


def test_test_mode_usage_errors(api, config_file: Path) -> None:
    ctx = str(config_file.parent / "ctx")

    local_alone = api.run("e", "create", "--local", str(config_file), ctx)
    assert local_alone.code == 2
    assert local_alone.err.startswith("Error: --local needs --test-mode")

    assert api.run("e", "create", "-t", "--paused", str(config_file), ctx).code == 2
    assert api.run("e", "create", "-t", "-f", str(config_file), ctx).code == 2

    no_context = api.run("e", "create", "--local", "-t", str(config_file))
    assert no_context.code == 2 and "pass the CONTEXT folder" in no_context.err
    assert api.requests == []


def test_an_nni_config_is_refused(api, tmp_path: Path) -> None:
    nni = tmp_path / "nni.yaml"
    nni.write_text("trialCommand: python3 mnist.py\nsearchSpace: {lr: {_type: choice, _value: [0.1]}}\n")

    result = api.run("e", "create", "-t", str(nni), str(tmp_path))

    assert result.code == 2
    assert f"Error: {nni} is an NNI config" in result.err
    assert api.requests == []
